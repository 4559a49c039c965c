#pragma once
// User preferences: paradigm definitions, analysis tolerances and colour maps, kept with QSettings.
// A plain value type so it can be copied into background jobs.
#include <QColor>
#include <QSettings>
#include <QString>
#include <QStringList>
#include <string>
#include <vector>

#include "attnlens/analysis/statistics.h"
#include "attnlens/attention/paradigm.h"

namespace attnlens::gui {

struct Preferences {
    // Paradigm definitions in the CLI's form ("NAME:key=value,..."). A definition whose name is a
    // preset's replaces that preset (e.g. "focused:norm=divide,kernel=focused,p=2"); any other name
    // adds a custom paradigm after the presets.
    QStringList paradigmSpecs;
    AnalysisOptions analysis;  // rank tolerance, spatial-only spectra, k list, tau, magnitude grid
    QString sequentialMap = QStringLiteral("viridis");
    QString divergingMap = QStringLiteral("blue-white-red");
    QColor nanColor = QColor(255, 0, 255);  // magenta: absent from every offered colour map
    int imageOpacityPercent = 60;           // input image's outlines over the token map: visible by default
    // The local branch (resources/format.md 1a) in the token map, comparison, matrix and spectrum:
    // on/off and the V channel whose kernel is added (-1: the mean over the head's channels).
    bool localBranch = false;
    int localBranchChannel = -1;

    // Presets with overrides applied, then the custom paradigms. Invalid specs are skipped and
    // described in *problems (one line each) when given.
    std::vector<Paradigm> paradigms(QStringList* problems = nullptr) const;

    static Preferences load(QSettings& settings, QStringList* problems = nullptr);
    void save(QSettings& settings) const;
};

// {3, 5, 7} -> "3,5,7", the form parseIntList reads back (the k list of the local mass).
QString formatKList(const std::vector<int>& ks);

}  // namespace attnlens::gui
