#include "document/row_data.h"

#include <algorithm>
#include <cmath>

namespace attnlens::gui {

void summariseRow(RowData& r) {
    double lo = INFINITY, hi = -INFINITY;
    r.nonFiniteEntries = 0;
    for (Index j = 0; j < r.values.size(); ++j) {
        const double v = r.values[j];
        if (std::isfinite(v)) {
            lo = std::min(lo, v);
            hi = std::max(hi, v);
        } else {
            ++r.nonFiniteEntries;
        }
    }
    r.minFinite = std::isfinite(lo) ? lo : 0;
    r.maxFinite = std::isfinite(hi) ? hi : 0;
    r.colourMin = r.minFinite;
    r.colourMax = r.maxFinite;
}

}  // namespace attnlens::gui
