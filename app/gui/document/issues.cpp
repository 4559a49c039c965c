#include "document/issues.h"

#include <map>
#include <tuple>

namespace attnlens::gui {

QString issueKindText(IssueKind kind) {
    switch (kind) {
        case IssueKind::Preferences:
            return QStringLiteral("preferences");
        case IssueKind::UnreadableData:
            return QStringLiteral("unreadable data");
        case IssueKind::NonFiniteInput:
            return QStringLiteral("non-finite input");
        case IssueKind::FlaggedRow:
            return QStringLiteral("flagged row");
        case IssueKind::LocalBranch:
            return QStringLiteral("local branch");
        case IssueKind::Image:
            return QStringLiteral("image");
        case IssueKind::JobFailed:
            return QStringLiteral("job failed");
        case IssueKind::Memory:
            return QStringLiteral("memory");
        case IssueKind::Error:
            return QStringLiteral("error");
    }
    return QString();
}

QStringList nonFiniteIssueTexts(const std::vector<NonFiniteValue>& values, const DumpInfo& info) {
    struct Group {
        long long count = 0;
        Index first = 0;
    };
    std::map<std::tuple<int, int, int, char>, Group> groups;  // in image, layer, head order
    for (const NonFiniteValue& v : values) {
        Group& g = groups[{v.image, v.layer, v.head, v.tensor}];
        if (g.count == 0 || v.token < g.first) g.first = v.token;
        ++g.count;
    }
    QStringList out;
    for (const auto& [key, g] : groups) {
        const auto& [image, layer, head, tensor] = key;
        const QString layerName = layer >= 0 && std::size_t(layer) < info.layers.size()
                                      ? QString::fromStdString(info.layers[std::size_t(layer)].name)
                                      : QStringLiteral("#%1").arg(layer);
        out << QStringLiteral("image %1, layer %2, head %3: %4 %5 of %6 hold%7 NaN or Inf (first: token %8)")
                   .arg(image)
                   .arg(layerName)
                   .arg(head)
                   .arg(g.count)
                   .arg(g.count == 1 ? QStringLiteral("token") : QStringLiteral("tokens"))
                   .arg(QString::fromUtf8(tensorName(tensor)))
                   .arg(g.count == 1 ? QStringLiteral("s") : QString())
                   .arg(g.first);
    }
    return out;
}

}  // namespace attnlens::gui
