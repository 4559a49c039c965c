#pragma once
// "Compare paradigms" (render --view compare): the token map of the same query under every shown paradigm, in a grid
// (the layout of FLatten Fig. 3 and MALA Fig. 4); one click updates all. Colour range shared by all panels or per
// panel; optionally a difference map A - B between two chosen paradigms.
#include <cmath>
#include <optional>
#include <vector>

#include "document/local_branch_store.h"
#include "plot/color_maps.h"
#include "views/plot_view.h"

class QComboBox;
class QCheckBox;

namespace attnlens::gui {

class CompareView : public PlotView {
    Q_OBJECT
public:
    CompareView(Session* session, QWidget* parent = nullptr);
    QString viewId() const override { return QStringLiteral("compare"); }
    QString viewTitle() const override { return QStringLiteral("Compare paradigms"); }
    bool ownsHover() const override { return true; }
    bool fitAspect() override;

    struct Panel : HeatmapPanel {  // scale: its own, or nullptr when the range is shared
        int paradigm = -1;         // -1 for the difference panel
        ClippedValues clipped;     // the weights a held range clips in this panel
    };
    const std::vector<Panel>& panels() const { return panels_; }
    QCPColorScale* sharedScale() const { return shared_; }
    QString shownNote() const;  // the note under the panels as drawn

    void setSharedRange(bool shared);
    bool sharedRange() const { return sharedRange_; }
    // Shows A - B (paradigm indices) as an extra panel; a < 0 hides it.
    void setDifference(int a, int b);
    // The difference panel's paradigms (A, B), (-1, -1) when it is off.
    std::pair<int, int> difference() const { return {diffA_, diffB_}; }

    // Hold colour range: every paradigm panel keeps `range` (default: the range spanning what the
    // panels show now) while the query, head, layer or image change, until released. The
    // difference panel keeps its own range. The session file saves and restores it.
    void holdColourRange(bool on, std::optional<QCPRange> range = std::nullopt);
    bool colourRangeHeld() const { return heldRange_.has_value(); }
    QCPRange heldColourRange() const { return heldRange_.value_or(QCPRange()); }
    QCheckBox* holdColourRangeBox() const { return holdRange_; }

protected:
    void rebuild() override;

private:
    // Pass 1's colour extent over the paradigm panels (for the shared range).
    struct SharedExtent {
        double lo = INFINITY, hi = -INFINITY;
        bool anySigned = false;
    };
    void buildLayout();
    // The steps of rebuild(): the rows' read error (pending: a rollout is on its way), the maps'
    // data and extent, their colours and titles (returns the panels without a finite weight).
    QString shownRowsError(bool rollout, bool& pending) const;
    SharedExtent fillMaps(bool withBranch);
    int colourPanels(const SharedExtent& extent, bool rollout, const QString& readError);
    QString headerText(bool rollout) const;
    // A paradigm panel's title (its name, prefix weights, flags) and colour range.
    QString paradigmPanel(Panel& p, const SharedExtent& extent, const QString& readError, ColorRange& range) const;
    // The difference panel A_a - A_b: its data, title (with this query's distances) and range.
    QString differencePanel(Panel& p, bool rollout, const QString& readError, ColorRange& range) const;
    // The note under the panels: what the colour is, the rollout or the branch, the kernel note.
    QString noteText(const BranchKernel* branch, bool rollout, const QString& branchError) const;
    void syncControls();
    void onMousePress(QMouseEvent* e);
    void onMouseMove(QMouseEvent* e);

    std::vector<Panel> panels_;
    QCPTextElement* header_ = nullptr;
    QCPTextElement* note_ = nullptr;
    QCPColorScale* shared_ = nullptr;
    std::vector<int> builtFor_;  // paradigms (and -1 for the difference) of the built layout
    TokenLayout builtLayout_{-1, -1, -1};
    bool builtShared_ = false;
    bool sharedRange_ = false;
    int diffA_ = -1, diffB_ = -1;
    QComboBox* rangeMode_ = nullptr;
    QCheckBox* diffOn_ = nullptr;
    QComboBox* diffA_combo_ = nullptr;
    QComboBox* diffB_combo_ = nullptr;
    QCheckBox* holdRange_ = nullptr;
    std::optional<QCPRange> heldRange_;
    bool syncing_ = false;
};

}  // namespace attnlens::gui
