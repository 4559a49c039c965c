#include "views/view_registry.h"

#include "views/claims_view.h"
#include "views/compare_view.h"
#include "views/confused_pairs_view.h"
#include "views/dump_pair_view.h"
#include "views/head_overview_view.h"
#include "views/locality_view.h"
#include "views/magnitude_view.h"
#include "views/matrix_view.h"
#include "views/spectrum_view.h"
#include "views/stats_views.h"
#include "views/sweep_view.h"
#include "views/token_map_view.h"

namespace attnlens::gui {
namespace {

template <class View>
std::function<std::unique_ptr<PlotView>(Session*, Session*)> maker() {
    return [](Session* s, Session*) { return std::make_unique<View>(s); };
}

}  // namespace

const std::vector<ViewEntry>& viewRegistry() {
    static const std::vector<ViewEntry> views{
        // id, place, draws the selected head, draws map content, needs a second dump, make
        {QStringLiteral("tokenmap"), ViewPlace::MainTab, true, true, false, maker<TokenMapView>()},
        {QStringLiteral("compare"), ViewPlace::MainTab, true, true, false, maker<CompareView>()},
        {QStringLiteral("matrix"), ViewPlace::MainTab, true, false, false, maker<MatrixView>()},
        {QStringLiteral("dumps"), ViewPlace::MainTab, true, false, true,
         [](Session* s, Session* second) { return std::make_unique<DumpPairView>(s, second); }},
        {QStringLiteral("spectrum"), ViewPlace::StatisticsTab, true, false, false, maker<SpectrumView>()},
        {QStringLiteral("local"), ViewPlace::StatisticsTab, false, false, false, maker<LocalMassView>()},
        {QStringLiteral("confusion"), ViewPlace::StatisticsTab, false, false, false, maker<ConfusionView>()},
        {QStringLiteral("magnitude"), ViewPlace::StatisticsTab, true, false, false, maker<MagnitudeView>()},
        {QStringLiteral("layers"), ViewPlace::StatisticsTab, false, false, false, maker<LayerStatsView>()},
        {QStringLiteral("distance"), ViewPlace::StatisticsTab, false, false, false, maker<DistanceView>()},
        {QStringLiteral("sweep"), ViewPlace::StatisticsTab, false, false, false, maker<SweepView>()},
        {QStringLiteral("locality"), ViewPlace::StatisticsTab, false, false, false, maker<LocalityView>()},
        {QStringLiteral("heads"), ViewPlace::StatisticsTab, false, false, false, maker<HeadOverviewView>()},
        {QStringLiteral("pairs"), ViewPlace::StatisticsTab, true, false, false, maker<ConfusedPairsView>()},
        {QStringLiteral("claims"), ViewPlace::StatisticsTab, false, false, false, maker<ClaimsView>()},
    };
    return views;
}

const ViewEntry* findView(const QString& id) {
    for (const ViewEntry& v : viewRegistry())
        if (v.id == id) return &v;
    return nullptr;
}

QString viewIdList() {
    QStringList ids;
    for (const ViewEntry& v : viewRegistry()) ids << v.id;
    return ids.join(QStringLiteral(", "));
}

}  // namespace attnlens::gui
