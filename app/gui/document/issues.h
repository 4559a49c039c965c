#pragma once
// The entries of the Issues dock: problems found in the data, the preferences or a job, listed
// (never a modal box) with the file they are about.
#include <QMetaType>
#include <QString>
#include <QStringList>
#include <vector>

#include "attnlens/dump/dump.h"

namespace attnlens::gui {

// What an entry of the issues list is about.
enum class IssueKind {
    Preferences,     // a stored preference was out of range and reset
    UnreadableData,  // a damaged chunk or attribute of the dump
    NonFiniteInput,  // NaN or Inf in Q or K
    FlaggedRow,      // a row of the matrix with no valid value
    LocalBranch,     // the layer's local branch cannot be used
    Image,           // the input image cannot be shown
    JobFailed,       // a background analysis failed
    Memory,          // an analysis ran with fewer threads to fit in memory
    Error,           // opening or exporting failed
};
// The text of the kind column ("non-finite input").
QString issueKindText(IssueKind kind);

// One entry per (image, layer, head, tensor) with non-finite values, with their count and first
// token ("image 0, layer blocks.2, head 1: 197 tokens of q hold NaN or Inf (first: token 0)"): a head
// of NaN made 197 near-identical entries.
QStringList nonFiniteIssueTexts(const std::vector<NonFiniteValue>& values, const DumpInfo& info);

struct Issue {
    IssueKind kind;
    QString text;
    // The dump the issue is about (its path) and which opening of it (Session::dumpEpoch): entries of
    // a dump that was replaced are removed from the list. Empty for issues about no dump (a
    // preference, an open or export that failed).
    QString file = {};
    quint64 dumpEpoch = 0;
};

}  // namespace attnlens::gui

Q_DECLARE_METATYPE(attnlens::gui::Issue)
