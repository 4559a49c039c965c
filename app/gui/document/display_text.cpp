#include "document/display_text.h"

#include <QFileInfo>
#include <QStringList>

namespace attnlens::gui {

QString prefixName(int prefix, int count) {
    if (prefix == 0) return QStringLiteral("CLS");
    if (prefix == 1 && count == 2) return QStringLiteral("DIST");
    return QStringLiteral("P%1").arg(prefix);
}

QString tokenName(const TokenLayout& layout, Index token) {
    if (token < layout.prefix) return prefixName(int(token), layout.prefix);
    return QStringLiteral("(y %1, x %2)").arg(layout.row(token)).arg(layout.col(token));
}

QString keyGridNote(const AttentionLayout& layout) {
    if (!layout.reducedKeys()) return QString();
    return QStringLiteral(" of the %1 x %2 key grid").arg(layout.keys.gridH).arg(layout.keys.gridW);
}

QString layerLayoutLabel(const LayerInfo& l) {
    QString s = QStringLiteral("%1x%2").arg(l.layout.gridH).arg(l.layout.gridW);
    if (l.layout.prefix > 0) s += QStringLiteral("+%1").arg(l.layout.prefix);
    if (l.reducedKeys()) s += QStringLiteral(" → keys %1x%2").arg(l.keyLayout.gridH).arg(l.keyLayout.gridW);
    if (l.window && l.window->perHead()) {
        s += QStringLiteral(", stripes per head");
    } else if (l.window) {
        s += QStringLiteral(", %1x%2 windows").arg(l.window->rule.sizeH).arg(l.window->rule.sizeW);
        if (l.window->rule.shifted()) s += QStringLiteral(" shifted");
    }
    return s;
}

QString shortError(const QString& error, const QString& dumpPath) {
    QString e = error;
    if (!dumpPath.isEmpty()) e.replace(dumpPath, QFileInfo(dumpPath).fileName());
    return e;
}

QString wrapText(const QString& text, int width) {
    QStringList lines;
    for (const QString& paragraph : text.split('\n')) {
        QString line;
        for (const QString& word : paragraph.split(' ', Qt::SkipEmptyParts)) {
            if (!line.isEmpty() && line.size() + 1 + word.size() > width) {
                lines << line;
                line.clear();
            }
            line += (line.isEmpty() ? QString() : QStringLiteral(" ")) + word;
        }
        lines << line;
    }
    return lines.join('\n');
}

QString branchErrorNote(const QString& error, const QString& dumpPath, int width) {
    return wrapText(QStringLiteral("A only: local branch NOT added: ") + shortError(error, dumpPath), width);
}

QString kernelAppliedNote(const DumpInfo& info, std::span<const int> layers, std::span<const Paradigm> paradigms) {
    QStringList applied, changed;
    for (int l : layers)
        if (l >= 0 && l < int(info.layers.size()) && info.layers[std::size_t(l)].kernelApplied)
            applied << QString::fromStdString(info.layers[std::size_t(l)].name);
    for (const Paradigm& p : paradigms)
        if (p.usesKernel() && p.kernel != Kernel::Identity) changed << QString::fromStdString(p.name);
    if (applied.isEmpty() || changed.isEmpty()) return {};
    const QString which = applied.size() == 1 ? QStringLiteral("layer %1 holds").arg(applied.front())
                          : applied.size() == int(layers.size())
                              ? QStringLiteral("every layer shown holds")
                              : QStringLiteral("layers %1 hold").arg(applied.join(", "));
    return QStringLiteral(
               "%1 Q and K after the model's kernel (kernel_applied): %2 use%3 the identity kernel there, so "
               "paradigms that differ only in their kernel coincide")
        .arg(which, changed.join(", "), changed.size() == 1 ? QStringLiteral("s") : QString());
}

}  // namespace attnlens::gui
