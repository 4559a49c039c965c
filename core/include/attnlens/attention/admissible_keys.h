#pragma once
// The keys each row may attend to, S_i: the yardstick every "uniform" and every "N" is taken over.
//
// A query can only put weight on its admissible keys, so uniform attention is uniform over S_i, not
// over the layer's N keys:
//   plain layers            S_i = every key of the layer (prefix tokens included): |S_i| = N;
//   spatial reduction (PVT) S_i = the n keys of the reduced grid (and its prefix);
//   window layers (Swin)    S_i = the query's window, and under Swin's mask (window_mask = true)
//                           only the window's keys of the query's own region: the mask's -100
//                           logit leaves them a weight of e^-100 relative, which is none;
//   per-head windows        (CSwin's stripes, format.md 1b @head_windows) the head's own windows.
// The local k x k neighbourhood N_k(i) of a spatial query lies on the image grid (the key grid under
// spatial reduction, centred on the query's key cell) and is clipped at the grid's border, never
// wrapped: inside a shifted window the tokens the roll brought together from opposite edges are
// far apart on the image. Uniform attention over S_i puts |N_k(i) ∩ S_i| / |S_i| in N_k(i).
#include <span>

#include "attnlens/attention/token_layout.h"
#include "attnlens/attention/window.h"

namespace attnlens {

class AdmissibleKeys {
public:
    // windows: the head's window partition (nullptr: every row may attend every key). It must be on
    // the queries' layout and outlive this object.
    explicit AdmissibleKeys(const AttentionLayout& layout, const WindowPartition* windows = nullptr);

    const AttentionLayout& layout() const { return layout_; }
    // True when every row's set is every key (plain layers and spatial reduction).
    bool everyKey() const { return windows_ == nullptr; }
    // |S_i| of the row of query token i.
    Index count(Index query) const;
    // S_i's tokens, ascending; only under window attention (everyKey() false).
    std::span<const Index> keys(Index query) const;
    // |N_k(i) ∩ S_i| for the spatial query at grid (y, x); k odd and >= 1.
    Index localCount(int y, int x, int k) const;
    // |N_k(i) ∩ S_i| / |S_i|: the share of a row uniform over S_i that falls in N_k(i).
    double uniformLocalShare(int y, int x, int k) const;

private:
    AttentionLayout layout_;
    const WindowPartition* windows_ = nullptr;
};

}  // namespace attnlens
