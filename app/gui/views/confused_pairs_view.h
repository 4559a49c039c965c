#pragma once
// Statistics > Pairs: the confused query pairs of the selected head under the token map's paradigm
// (InLine Sec. 4.1: distinct queries whose rows are closer than tau), closest rows first, in a
// table; the chosen pair's two rows side by side on the grid with both queries framed, and InLine's
// injectivity conditions (rank of phi(K) and of [phi(K), 1] against d) in the title. Computed in
// the background per head; choosing a pair also makes its first query the selected one.
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "attnlens/analysis/statistics.h"
#include "document/head_results.h"
#include "document/head_results_store.h"
#include "views/plot_view.h"

class QTableWidget;

namespace attnlens::gui {

class ConfusedPairsView : public PlotView {
    Q_OBJECT
public:
    ConfusedPairsView(Session* session, QWidget* parent = nullptr);
    QString viewId() const override { return QStringLiteral("pairs"); }
    QString viewTitle() const override { return QStringLiteral("Pairs"); }
    bool waitingForResults() const override { return waiting_; }
    bool fitAspect() override;

    using Result = ConfusedPairsResult;
    // The selected head's result (nullptr while computing or when it failed: errorText()).
    const Result* result() const;
    // Why the selected head has no result (the job failed or was cancelled); empty otherwise.
    QString errorText() const;
    QTableWidget* table() const { return table_; }
    // The pair shown (row of the table); -1 when none.
    int shownPair() const { return shownPair_; }
    void showPair(int index);
    const HeatmapPanel& panel(int i) const { return panels_[i]; }

    static constexpr int kListedPairs = 200;

protected:
    void rebuild() override;

private:
    ConfusedPairsKey key() const;
    // Submits the selected head's confused pairs unless stored, failed or computing.
    void submitPairs(const ConfusedPairsKey& key);
    // The pair's two rows on the grid in one colour range, both queries framed on both maps.
    void drawPair(const ConfusedPair& pair);
    void fillTable(const Result& r);

    QTableWidget* table_ = nullptr;
    std::optional<ConfusedPairsKey> tableKey_;  // of the pairs in the table
    int shownPair_ = -1;
    bool waiting_ = false;
    HeatmapPanel panels_[2];
    TokenLayout builtLayout_{-1, -1, -1};
};

}  // namespace attnlens::gui
