#pragma once
// What every store of the document is (session.h lists them): a QObject of its own whose results
// land on the GUI thread, with two signals the Session forwards: changed() when a result lands, a
// job fails or the store's own state moves, and issueFound() for a problem with the data or a job
// (the issues list; the user's Cancel is none).
#include <QObject>
#include <QString>
#include <functional>

#include "document/issues.h"
#include "document/job_runner.h"

namespace attnlens::gui {

class DocumentStore : public QObject {
    Q_OBJECT
public:
    using QObject::QObject;

Q_SIGNALS:
    void changed();
    void issueFound(attnlens::gui::IssueKind kind, const QString& text);

protected:
    void reportIssue(IssueKind kind, const QString& text) { Q_EMIT issueFound(kind, text); }
    // A job's failure: an issue unless it is the user's Cancel (a state the views show, with
    // Retry), then changed() so that the views show the failure.
    std::function<void(const JobFailure&)> failureHandler(const QString& label) {
        return [this, label](const JobFailure& f) {
            if (!f.cancelled()) reportIssue(IssueKind::JobFailed, label + QStringLiteral(": ") + f.message);
            Q_EMIT changed();
        };
    }
};

}  // namespace attnlens::gui
