#pragma once
// "Token map" (render --view tokenmap): the selected query's attention row on the H x W token grid, with a colour bar,
// the input image's outlines drawn over it (adjustable opacity), the query marked, and the prefix tokens (CLS, ...) as
// separate labelled cells below the grid. Clicking a cell makes it the query.
#include <optional>
#include <utility>
#include <vector>

#include "document/local_branch_store.h"
#include "document/row_data.h"
#include "plot/color_maps.h"
#include "views/plot_view.h"

class QCheckBox;
class QSlider;
class QLabel;

namespace attnlens::gui {

class TokenMapView : public PlotView {
    Q_OBJECT
public:
    TokenMapView(Session* session, QWidget* parent = nullptr);
    QString viewId() const override { return QStringLiteral("tokenmap"); }
    QString viewTitle() const override { return QStringLiteral("Token map"); }
    bool ownsHover() const override { return true; }
    bool fitAspect() override;

    // For tests and the benchmark: the widgets showing the data.
    QCPColorMap* colorMap() const { return map_; }
    QCPAxisRect* gridRect() const { return rect_; }
    QCPAxisRect* prefixRect() const { return prefixRect_; }
    QCPColorScale* colorScale() const { return scale_; }
    const std::vector<QCPItemRect*>& prefixCells() const { return prefixCells_; }
    double prefixValue(int i) const { return i < int(prefixValues_.size()) ? prefixValues_[std::size_t(i)] : NAN; }
    QString titleText() const;
    QString noteText() const;  // the line under the title (row sum, local branch, flags)
    const WindowOverlay& windowOverlay() const { return windows_; }
    // Spatial reduction: the key cells' borders drawn over the grid (empty otherwise).
    int keyCellLines() const { return int(keyLines_.size()); }
    // The opacity of the input image's outlines over the map (image_outlines.h): 0 % the map only.
    // Lines, not a blend: every cell between them keeps a colour of the colour bar.
    void setImageOpacity(int percent);
    int imageOpacity() const { return opacityPercent_; }
    bool imageShown() const { return image_ && image_->visible(); }  // the outlines over the map
    bool showsMap() const { return map_ && map_->visible(); }        // a map, not only a reason
    QLabel* opacityValueLabel() const { return opacityValue_; }      // "60 %"
    // The outline pixels of the shown image (Format_Alpha8, the image's outline mask scaled to the
    // map's size is what is drawn) and their colour: black or white, whichever contrasts with the
    // colour of zero weight.
    const QImage& outlineMask() const { return outlineMask_; }
    QColor outlineColour() const { return outlineColour_; }

    // Hold colour range: the colour range stays `range` (default: the one shown now) while the
    // query, head, layer or image change, until released. The session file saves and restores it.
    void holdColourRange(bool on, std::optional<QCPRange> range = std::nullopt);
    bool colourRangeHeld() const { return heldRange_.has_value(); }
    QCPRange heldColourRange() const { return heldRange_.value_or(QCPRange()); }
    QCheckBox* holdColourRangeBox() const { return holdRange_; }

protected:
    void rebuild() override;

private:
    void buildLayout(const TokenLayout& layout);
    void buildPrefixStrip(QCPLayoutGrid* grid, const TokenLayout& layout);  // the prefix cells under the map
    // The colour scale of the row (sequential, or diverging for signed weights), its labels and
    // the image's outline colour; returns the gradient and the range drawn.
    std::pair<QCPColorGradient, QCPRange> applyColours(const RowData& row, bool withBranch);
    void fillPrefixCells(const RowData& row, const TokenLayout& keys, QCPColorGradient gradient, const QCPRange& range);
    // The windows (the query's outlined) and the query's marker on the grid or its prefix cell.
    void placeQueryMarkers(const RowData& row, Index query);
    // The note under the title: the row's sum and range or why it is flagged, the branch, windows,
    // kernel and reduction notes; alarming when it reports a problem (drawn red).
    QString rowNote(const RowData& row, const AttentionLayout& geometry, const BranchKernel* branch, Index query,
                    bool& alarming) const;
    void showWithoutMap(const RowData& row, Index query);
    void onMousePress(QMouseEvent* e);
    void onMouseMove(QMouseEvent* e);
    void updateImage(const QColor& zeroColour);
    void updateKeyCells(const AttentionLayout& geometry);

    TokenLayout built_{-1, -1, -1};
    QCPTextElement* title_ = nullptr;
    QCPTextElement* note_ = nullptr;
    QCPAxisRect* rect_ = nullptr;
    QCPColorMap* map_ = nullptr;
    QCPColorScale* scale_ = nullptr;
    QCPAxisRect* prefixRect_ = nullptr;
    std::vector<QCPItemRect*> prefixCells_;
    std::vector<QCPItemText*> prefixLabels_;
    std::vector<double> prefixValues_;
    std::vector<std::pair<QString, QString>> prefixLabelParts_;  // name and weight of each prefix cell
    QCPItemPixmap* image_ = nullptr;
    CellMarker marker_, prefixMarker_;
    WindowOverlay windows_;
    std::vector<QCPItemLine*> keyLines_;
    AttentionLayout keyLinesFor_{TokenLayout{-1, -1, -1}};  // the layout keyLines_ were drawn for
    QSlider* opacity_ = nullptr;
    QLabel* opacityLabel_ = nullptr;
    QLabel* opacityValue_ = nullptr;
    QCheckBox* holdRange_ = nullptr;
    std::optional<QCPRange> heldRange_;
    // The weights the held range clips on the map drawn last (applyColours; said in the note).
    ClippedValues clipped_;
    int opacityPercent_ = 0;
    int imageShownFor_ = -1;
    QImage outlineMask_;
    QColor outlineColour_;
    double drawnOpacity_ = -1;
};

}  // namespace attnlens::gui
