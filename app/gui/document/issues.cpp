#include "document/issues.h"

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

}  // namespace attnlens::gui
