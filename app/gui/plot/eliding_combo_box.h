#pragma once
// A combo box whose closed face elides its text at the right ("softmax.block0 · soft…") instead of cutting
// it mid-letter as QComboBox does when the box is narrower than the text; while it is elided, hovering shows
// the whole text (above the box's own tooltip, if it has one).
// The list that opens is QAbstractItemView's, which elides by itself.
#include <QComboBox>
#include <QHelpEvent>
#include <QStyleOptionComboBox>
#include <QStylePainter>
#include <QToolTip>

namespace attnlens::gui {

class ElidingComboBox : public QComboBox {
public:
    using QComboBox::QComboBox;

    // The text the closed box shows at its present size.
    QString displayedText() const {
        QStyleOptionComboBox opt;
        initStyleOption(&opt);
        return elided(opt);
    }

protected:
    void paintEvent(QPaintEvent*) override {
        QStylePainter p(this);
        p.setPen(palette().color(QPalette::Text));
        QStyleOptionComboBox opt;
        initStyleOption(&opt);
        p.drawComplexControl(QStyle::CC_ComboBox, opt);
        opt.currentText = elided(opt);
        p.drawControl(QStyle::CE_ComboBoxLabel, opt);
    }

    bool event(QEvent* e) override {
        if (e->type() == QEvent::ToolTip) {
            const QString shown = displayedText();
            if (shown != currentText()) {
                const QString own = toolTip();
                QToolTip::showText(static_cast<QHelpEvent*>(e)->globalPos(),
                                   own.isEmpty() ? currentText() : currentText() + QStringLiteral("\n\n") + own, this);
                return true;
            }
        }
        return QComboBox::event(e);
    }

private:
    QString elided(const QStyleOptionComboBox& opt) const {
        QRect field = style()->subControlRect(QStyle::CC_ComboBox, &opt, QStyle::SC_ComboBoxEditField, this);
        if (!opt.currentIcon.isNull()) field.setLeft(field.left() + opt.iconSize.width() + 4);
        return fontMetrics().elidedText(opt.currentText, Qt::ElideRight, field.width());
    }
};

}  // namespace attnlens::gui
