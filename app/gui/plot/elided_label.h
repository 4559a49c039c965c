#pragma once
// A label that gives up width before anything else in the status bar does: its text is elided at
// the right when space is short, the whole text stays in the tooltip. The value under the cursor
// sits beside such labels and keeps the width it needs.
#include <QLabel>
#include <QPainter>

namespace attnlens::gui {

class ElidedLabel : public QLabel {
public:
    using QLabel::QLabel;
    QSize minimumSizeHint() const override { return {fontMetrics().horizontalAdvance(QStringLiteral("AB…")), 0}; }
    QSize sizeHint() const override {
        return {fontMetrics().horizontalAdvance(text()) + 8, QLabel::sizeHint().height()};
    }

protected:
    void paintEvent(QPaintEvent*) override {
        QPainter p(this);
        const QRect r = contentsRect();
        p.setPen(palette().color(foregroundRole()));
        p.drawText(r, Qt::AlignVCenter | Qt::AlignLeft, fontMetrics().elidedText(text(), Qt::ElideRight, r.width()));
    }
};

}  // namespace attnlens::gui
