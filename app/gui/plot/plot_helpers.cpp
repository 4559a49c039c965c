#include "plot/plot_helpers.h"

#include <algorithm>
#include <cmath>

namespace attnlens::gui {
namespace {

// The property holding a wrapped text element's unbroken text.
constexpr const char* kFullText = "attnlensFullText";

// Lines of at most `width` pixels, broken at spaces; a line that must break does so after its
// last " — ", " · " or comma when that leaves it at least half full, so that the parts of a title
// stay together ("Magnitude scaling (MALA Fig. 2) —" / "query ..."). A single word wider than the
// width keeps its own line, elided at its end (its first letters stay).
QStringList breakLine(const QString& text, const QFontMetrics& fm, int width) {
    if (fm.horizontalAdvance(text) <= width) return {text};
    const QStringList words = text.split(' ');
    auto preferred = [](const QString& w) {
        return w == QStringLiteral("—") || w == QStringLiteral("·") || w.endsWith(',');
    };
    QStringList lines;
    QStringList line;
    for (const QString& word : words) {
        line << word;
        if (line.size() == 1 || fm.horizontalAdvance(line.join(' ')) <= width) continue;
        line.removeLast();
        int cut = int(line.size());  // words kept on this line
        for (int i = int(line.size()) - 1; i > 0; --i)
            if (preferred(line[i]) && fm.horizontalAdvance(line.mid(0, i + 1).join(' ')) >= width / 2) {
                cut = i + 1;
                break;
            }
        lines << line.mid(0, cut).join(' ');
        line = line.mid(cut);
        line << word;
    }
    if (!line.isEmpty()) lines << line.join(' ');
    for (QString& l : lines)
        if (fm.horizontalAdvance(l) > width) l = fm.elidedText(l, Qt::ElideRight, width);
    return lines;
}

// The width of the last layout: its elements' extent (after an export's toPixmap the layout's own
// outer rect is the widget's again, while the elements keep the export's geometry).
int layoutWidth(QCustomPlot* plot) {
    QRect extent;
    for (int i = 0; i < plot->plotLayout()->elementCount(); ++i)
        if (QCPLayoutElement* e = plot->plotLayout()->elementAt(i)) extent |= e->outerRect();
    return extent.width() > 0 ? extent.width() : plot->viewport().width();
}

// The width an element's text is broken for: the element's own from the last layout, inside its
// margins (a panel's title its panel's), else the plot's.
int widthFor(QCPTextElement* element) {
    const int own = element->rect().width();
    return own > 0 ? own + 12 : layoutWidth(element->parentPlot());
}

void wrapTo(QCPTextElement* element, int width) {
    const QString full = element->property(kFullText).toString();
    const QFontMetrics fm(element->font());
    QStringList lines;
    for (const QString& paragraph : full.split('\n')) lines << breakLine(paragraph, fm, std::max(40, width - 12));
    const QString text = lines.join('\n');
    if (text != element->text()) element->setText(text);
}

}  // namespace

QCPTextElement* resetWithTitle(QCustomPlot* plot, const QString& title) {
    plot->clearItems();
    plot->clearPlottables();
    plot->plotLayout()->clear();
    plot->setAutoAddPlottableToLegend(false);
    QCPTextElement* t = addWrappedText(plot, 11, true);
    plot->plotLayout()->addElement(0, 0, t);
    plot->plotLayout()->setRowStretchFactor(0, 0.01);
    setWrappedText(t, title);
    return t;
}

QCPLayoutGrid* addBody(QCustomPlot* plot, int row) {
    auto* body = new QCPLayoutGrid;
    plot->plotLayout()->addElement(row, 0, body);
    return body;
}

void WrappedText::setSteadyHeight(bool on) {
    steady_ = on;
    steadyWidth_ = -1;
    steadyHeight_ = 0;
    setTextFlags(on ? int(Qt::AlignHCenter | Qt::AlignTop | Qt::TextWordWrap)
                    : int(Qt::AlignCenter | Qt::TextWordWrap));
}

QSize WrappedText::minimumOuterSizeHint() const {
    const QSize text = QCPTextElement::minimumOuterSizeHint();
    int height = text.height();
    if (steady_) {
        if (outerRect().width() != steadyWidth_) {
            steadyWidth_ = outerRect().width();
            steadyHeight_ = 0;
        }
        steadyHeight_ = std::max(steadyHeight_, height);
        height = steadyHeight_;
    }
    return {std::min(text.width(), 60), height};
}

QSize WrappedText::maximumOuterSizeHint() const {
    QSize max = QCPTextElement::maximumOuterSizeHint();
    if (steady_) max.setHeight(std::max(max.height(), steadyHeight_));
    return max;
}

QCPTextElement* addWrappedText(QCustomPlot* plot, int pointSize, bool bold) {
    return new WrappedText(plot, QFont(plot->font().family(), pointSize, bold ? QFont::Bold : QFont::Normal));
}

void setWrappedText(QCPTextElement* element, const QString& text) {
    element->setProperty(kFullText, text);
    wrapTo(element, widthFor(element));
}

bool fitWrappedTexts(QCustomPlot* plot) {
    bool changed = false;
    for (QCPLayoutElement* e : plot->plotLayout()->elements(true)) {
        auto* element = qobject_cast<QCPTextElement*>(e);
        if (!element || !element->property(kFullText).isValid()) continue;
        const QString before = element->text();
        wrapTo(element, widthFor(element));
        changed |= element->text() != before;
    }
    return changed;
}

QString unwrappedText(const QCPTextElement* element) {
    const QVariant full = element->property(kFullText);
    return full.isValid() ? full.toString() : element->text();
}

namespace {

// An axis position as its reader sees it: the category name of a text ticker, else the number.
QString axisValueText(QCPAxis* axis, double v) {
    if (auto text = axis->ticker().dynamicCast<QCPAxisTickerText>()) {
        const auto& ticks = text->ticks();
        if (const auto it = ticks.find(v); it != ticks.end()) return it.value().simplified();
    }
    if (axis->scaleType() == QCPAxis::stLogarithmic || std::abs(v) >= 1e4 || (v != 0 && std::abs(v) < 1e-3))
        return QString::number(v, 'g', 4);
    return QString::number(v, 'g', 5);
}

constexpr const char* kAxisHoverName = "attnlensHoverName";

QString axisName(QCPAxis* axis, const QString& fallback) {
    const QString label = axis->label().section('\n', 0, 0).simplified();
    if (!label.isEmpty()) return label;
    // Stacked panels drop the labels of their upper axes; the hover still names what they count.
    const QString named = axis->property(kAxisHoverName).toString();
    return named.isEmpty() ? fallback : named;
}

}  // namespace

void setAxisHoverName(QCPAxis* axis, const QString& name) { axis->setProperty(kAxisHoverName, name); }

QString plottableValueAt(QCustomPlot* plot, const QPointF& pos) {
    double best = 8;  // pixels
    QString text;
    for (int i = 0; i < plot->plottableCount(); ++i) {
        QCPAbstractPlottable* p = plot->plottable(i);
        if (!p->visible() || !p->keyAxis() || !p->keyAxis()->axisRect()->rect().contains(pos.toPoint())) continue;
        if (auto* map = qobject_cast<QCPColorMap*>(p)) {
            double key = 0, value = 0;
            map->pixelsToCoords(pos, key, value);
            int x = 0, y = 0;
            map->data()->coordToCell(key, value, &x, &y);
            if (x < 0 || y < 0 || x >= map->data()->keySize() || y >= map->data()->valueSize()) continue;
            return QStringLiteral("%1%2 %3 · %4 %5 · value %6")
                .arg(p->name().isEmpty() ? QString() : p->name() + QStringLiteral(": "),
                     axisName(p->keyAxis(), QStringLiteral("x")), axisValueText(p->keyAxis(), std::round(key)),
                     axisName(p->valueAxis(), QStringLiteral("y")), axisValueText(p->valueAxis(), std::round(value)))
                .arg(QString::number(map->data()->cell(x, y), 'g', 5));
        }
        QCPPlottableInterface1D* data = p->interface1D();
        if (!data) continue;
        QVariant details;
        const double d = p->selectTest(pos, false, &details);
        if (d < 0 || d >= best) continue;
        const QCPDataSelection hit = details.value<QCPDataSelection>();
        if (hit.isEmpty()) continue;
        const int index = hit.dataRange().begin();
        if (index < 0 || index >= data->dataCount()) continue;
        best = d;
        text =
            QStringLiteral("%1%2 %3 · %4 %5")
                .arg(p->name().isEmpty() ? QString() : p->name() + QStringLiteral(": "),
                     axisName(p->keyAxis(), QStringLiteral("x")), axisValueText(p->keyAxis(), data->dataMainKey(index)),
                     axisName(p->valueAxis(), QStringLiteral("y")),
                     QString::number(data->dataMainValue(index), 'g', 5));
    }
    return text;
}

namespace {
constexpr const char* kLabelForms = "attnlensLabelForms";
constexpr const char* kShownLabel = "attnlensShownLabel";
}  // namespace

void setColourBarLabels(QCPColorScale* scale, const QStringList& forms) {
    if (forms.isEmpty()) return;
    scale->setProperty(kLabelForms, forms);
    scale->setProperty(kShownLabel, forms.front());
    scale->axis()->setLabel(forms.front());
}

bool fitColourBarLabels(QCustomPlot* plot) {
    bool changed = false;
    for (QCPLayoutElement* e : plot->plotLayout()->elements(true)) {
        auto* scale = qobject_cast<QCPColorScale*>(e);
        if (!scale || !scale->visible()) continue;
        QCPAxis* axis = scale->axis();
        // A label the view set on the axis since the last fit is the new (only) form.
        if (axis->label() != scale->property(kShownLabel).toString())
            scale->setProperty(kLabelForms, QStringList{axis->label()});
        const QStringList forms = scale->property(kLabelForms).toStringList();
        if (forms.isEmpty()) continue;
        const QRect r = axis->axisRect()->rect();
        const int length = (axis->orientation() == Qt::Vertical ? r.height() : r.width()) - 4;
        const QFontMetrics fm(axis->labelFont());
        QString shown;
        for (const QString& form : forms)
            if (fm.horizontalAdvance(form) <= length) {
                shown = form;
                break;
            }
        if (shown.isNull()) shown = length > 16 ? fm.elidedText(forms.back(), Qt::ElideRight, length) : QString();
        scale->setProperty(kShownLabel, shown);
        if (axis->label() != shown) {
            axis->setLabel(shown);
            changed = true;
        }
    }
    return changed;
}

QCPAxisRect* addRect(QCustomPlot* plot, int row, int col, QCPLayoutGrid* grid) {
    auto* rect = new QCPAxisRect(plot);
    (grid ? grid : plot->plotLayout())->addElement(row, col, rect);
    for (QCPAxis* a : {rect->axis(QCPAxis::atBottom), rect->axis(QCPAxis::atLeft)}) {
        a->grid()->setPen(QPen(QColor(220, 220, 220), 0, Qt::DotLine));
        a->grid()->setVisible(true);
    }
    return rect;
}

QCPLegend* addSideLegend(QCustomPlot* plot, int row, int col, QCPLayoutGrid* grid) {
    if (!grid) grid = plot->plotLayout();
    auto* legend = new QCPLegend;
    auto* holder = new QCPLayoutGrid;
    grid->addElement(row, col, holder);
    holder->addElement(0, 0, legend);
    holder->addElement(1, 0, new QCPLayoutElement(plot));  // pushes the legend to the top
    holder->setRowStretchFactor(0, 0.001);
    // QCPLegend draws its border one pixel right of and below its rectangle: room for it where the
    // legend is flush with the figure's edge (exports clipped the right border).
    holder->setMinimumMargins(QMargins(0, 0, 2, 2));
    grid->setColumnStretchFactor(col, 0.001);
    legend->setLayer(QStringLiteral("legend"));
    legend->setFont(QFont(plot->font().family(), 8));
    legend->setBrush(Qt::white);
    legend->setBorderPen(QPen(QColor(180, 180, 180)));
    legend->setRowSpacing(-2);
    return legend;
}

bool fitCategoryLabels(QCPAxis* axis, const QStringList& names) {
    QCPAxisRect* rect = axis->axisRect();
    const int n = int(names.size());
    if (n == 0 || rect->width() < 20 || axis->range().size() <= 0) return false;
    const QFontMetrics fm(axis->tickLabelFont());
    const double slot = rect->width() / axis->range().size();  // pixels between neighbouring positions
    int widest = 0;
    for (const QString& name : names) widest = std::max(widest, fm.horizontalAdvance(name));
    const int lineHeight = fm.height() + 2;
    int step = 1;
    double angle = 0;
    if (widest + 8 > slot) {
        // Turned labels are parallel strips slot * step * sin(angle) apart.
        while (lineHeight > slot * step) ++step;
        const double s = std::min(1.0, lineHeight / (slot * step));
        angle = std::clamp(std::ceil(qRadiansToDegrees(std::asin(s)) / 5) * 5, 30.0, 90.0);
    }
    bool changed = false;
    if (axis->property("attnlensLabelStep").toInt() != step || !axis->property("attnlensLabelStep").isValid() ||
        axis->property("attnlensLabelNames").toStringList() != names) {
        QSharedPointer<QCPAxisTickerText> ticker(new QCPAxisTickerText);
        for (int i = 0; i < n; i += step) ticker->addTick(double(i), names[i]);
        axis->setTicker(ticker);
        axis->setProperty("attnlensLabelStep", step);
        axis->setProperty("attnlensLabelNames", names);
        changed = true;
    }
    if (!qFuzzyCompare(axis->tickLabelRotation() + 1000, -angle + 1000)) {
        axis->setTickLabelRotation(-angle);  // negative: each label ends under its tick
        changed = true;
    }
    // A turned first label reaches left of its tick: widen the rect's left margin to keep it inside
    // the plot (only ever widened within one build, so this settles).
    if (angle > 0) {
        const double radians = qDegreesToRadians(angle);
        const double reach =
            fm.horizontalAdvance(names.front()) * std::cos(radians) + fm.height() / 2.0 * std::sin(radians) + 4;
        const double tick = axis->coordToPixel(0) - axis->parentPlot()->viewport().left();
        if (reach > tick) {
            QMargins m = rect->minimumMargins();
            const int want = rect->margins().left() + int(std::ceil(reach - tick));
            if (want > m.left()) {
                m.setLeft(want);
                rect->setMinimumMargins(m);
                changed = true;
            }
        }
    }
    return changed;
}

QCPLegend* addLegend(QCustomPlot* plot, QCPAxisRect* rect, Qt::Alignment where) {
    auto* legend = new QCPLegend;
    rect->insetLayout()->addElement(legend, where);
    legend->setLayer(QStringLiteral("legend"));
    legend->setFont(QFont(plot->font().family(), 8));
    legend->setBrush(QColor(255, 255, 255, 220));
    legend->setRowSpacing(-2);
    return legend;
}

void setLogAxis(QCPAxis* axis, double base) {
    axis->setScaleType(QCPAxis::stLogarithmic);
    QSharedPointer<QCPAxisTickerLog> ticker(new QCPAxisTickerLog);
    ticker->setLogBase(base);
    axis->setTicker(ticker);
    if (base == 10) {
        // Every decade as 10^k ("gb" would mix 0.0001 with 10^-6 on one axis).
        axis->setNumberFormat(QStringLiteral("eb"));
        axis->setNumberPrecision(0);
    } else {
        axis->setNumberFormat(QStringLiteral("gb"));
        axis->setNumberPrecision(3);
    }
}

QCPGraph* addLine(QCPAxisRect* rect, const QVector<double>& x, const QVector<double>& y, const QColor& c,
                  const QString& name, QCPLegend* legend, Qt::PenStyle style, QCPScatterStyle::ScatterShape marker) {
    auto* g = new QCPGraph(rect->axis(QCPAxis::atBottom), rect->axis(QCPAxis::atLeft));
    g->setData(x, y, true);
    g->setPen(QPen(c, 1.6, style));
    g->setName(name);
    if (marker != QCPScatterStyle::ssNone) g->setScatterStyle(QCPScatterStyle(marker, c, c, 5));
    if (legend) g->addToLegend(legend);
    return g;
}

void fitValueRange(QCPAxis* axis, const std::vector<double>& values, bool log, double floorValue) {
    double lo = INFINITY, hi = -INFINITY;
    for (double v : values) {
        if (!std::isfinite(v) || (log && !(v > floorValue))) continue;
        lo = std::min(lo, v);
        hi = std::max(hi, v);
    }
    if (!std::isfinite(lo)) {
        axis->setRange(log ? 0.1 : 0, 1);
        return;
    }
    if (log) {
        axis->setRange(lo / 2, hi * 2);
    } else {
        const double pad = hi > lo ? 0.06 * (hi - lo) : std::max(0.05 * std::abs(hi), 1e-3);
        axis->setRange(lo - pad, hi + pad);
    }
}

}  // namespace attnlens::gui
