#pragma once
// One row as the token map and the paradigm comparison draw it: a row of A, of E_c = A + M_c, or
// a rollout row, with what the colour scale and the notes need.
#include <QString>

#include "attnlens/attention/attention.h"

namespace attnlens::gui {

struct RowData {
    RowVector values;
    RowStatus status = RowStatus::Ok;
    double minFinite = 0, maxFinite = 0;  // over finite entries (0, 0 when none)
    Index nonFiniteEntries = 0;
    bool withBranch = false;  // values are a row of E_c = A + M_c, not of A
    // Non-empty when the head could not be read (values are then all NaN): the views show this
    // instead of a map ("layer 2 cannot be read: ...").
    QString error;
    bool rollout = false;  // values are a rollout row (Session::mapContentRow), not a row of A
    // The colour range's extent: minFinite and maxFinite, except that a rollout's extent leaves out
    // the rolled-out token itself, whose residual share (w per layer) dwarfs every other weight.
    double colourMin = 0, colourMax = 0;
    Index rolledOut = -1;  // the token a rollout row is of
    bool pending = false;  // a rollout still being computed (values all NaN): the views say so
};

// Sets the finite range, the count of non-finite weights and the colour extent from values.
void summariseRow(RowData& row);

}  // namespace attnlens::gui
