#pragma once
// The statistics views: each one QCustomPlot with axes, legend and units: SpectrumView, MagnitudeView
// (the selected head and query) and the per-layer report views (LocalMassView, ConfusionView,
// LayerStatsView, DistanceView).
#include "views/layer_report_views.h"
#include "views/magnitude_view.h"
#include "views/spectrum_view.h"
