#pragma once
// Plain results of the per-head jobs that views start (the matrix image, the confused pairs, the
// magnitude curves), kept in the document's HeadResultsStore (head_results_store.h) so that one job
// runner and one failure type serve every view, and a result outlives a view's rebuild.
#include <QString>
#include <memory>
#include <utility>
#include <vector>

#include <qcustomplot.h>

#include "attnlens/analysis/statistics.h"
#include "attnlens/math/tensor.h"

namespace attnlens::gui {

// The matrix ready for display, built off the GUI thread.
struct MatrixImage {
    std::shared_ptr<QCPColorMapData> data;  // key = key token j, value = query token i
    double lower = 0, upper = 1;            // colour range of the (transformed) values
    bool diverging = false;
    QString transform;     // "linear", "log10 A" or "symlog"
    long long tokens = 0;  // rows: queries
    long long keys = 0;    // columns: keys (tokens, unless spatial reduction made A N x n)
    long long flaggedRows = 0;
    double floor = 0;  // log: weights below this are drawn at the lowest colour
    // Window attention ordered by window: display position r shows token order[r] (rows and
    // columns alike), position[token] the inverse; both empty in token order.
    std::vector<Index> order, position;
    Index tokenAt(Index r) const { return order.empty() ? r : order[std::size_t(r)]; }
    Index displayOf(Index token) const { return position.empty() ? token : position[std::size_t(token)]; }
};
// Builds the display data; exposed for tests. logScale: non-negative matrices use log10(max(A,
// floor)) with floor = 1e-6 max A; signed ones use sign(A) log10(1 + |A|/t), t = 1e-4 max|A|.
MatrixImage buildMatrixImage(const Eigen::Ref<const Eigen::Matrix<double, -1, -1, Eigen::RowMajor>>& a,
                             bool signedParadigm, bool logScale);

// The selected head's most confused query pairs and its injectivity conditions (Confused pairs).
struct ConfusedPairsResult {
    ConfusedPairList list;
    InjectivityConditions conditions;
};

// The magnitude view's data for one query (MALA Fig. 2): the shown paradigm's row at several
// query scales, keys in the order of their weight at a = 1, and each shown paradigm's curves.
struct MagnitudeCurves {
    int rowParadigm = -1;
    std::vector<double> rowFactors;                      // every second factor of MagnitudeOptions
    Matrix scaledRows;                                   // rowFactors x keys
    std::vector<std::pair<int, MagnitudeCurve>> curves;  // (paradigm, curve) per shown paradigm
};

}  // namespace attnlens::gui
