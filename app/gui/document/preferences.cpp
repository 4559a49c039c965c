#include "document/preferences.h"

#include <QStringList>
#include <algorithm>
#include <functional>
#include <initializer_list>

#include "attnlens/dump/list_parser.h"
#include "attnlens/io/error.h"

namespace attnlens::gui {

std::vector<Paradigm> Preferences::paradigms(QStringList* problems) const {
    std::vector<Paradigm> result = presetParadigms();
    for (const QString& spec : paradigmSpecs) {
        const QString trimmed = spec.trimmed();
        if (trimmed.isEmpty() || trimmed.startsWith('#')) continue;
        try {
            Paradigm p = Paradigm::parse(trimmed.toStdString());
            bool replaced = false;
            for (Paradigm& existing : result) {
                if (existing.name == p.name) {
                    existing = p;
                    replaced = true;
                    break;
                }
            }
            if (!replaced) result.push_back(p);
        } catch (const Error& e) {
            if (problems) problems->push_back(QStringLiteral("paradigm \"%1\": %2").arg(trimmed, e.what()));
        }
    }
    return result;
}

QString formatKList(const std::vector<int>& ks) {
    QStringList parts;
    for (int k : ks) parts << QString::number(k);
    return parts.join(',');
}

Preferences Preferences::load(QSettings& s, QStringList* problems) {
    Preferences p;
    s.beginGroup(QStringLiteral("preferences"));
    p.paradigmSpecs = s.value(QStringLiteral("paradigms"), p.paradigmSpecs).toStringList();
    // Each stored analysis option is read by the parsers and checked by the rule of attnlens-cli
    // (list_parser.h, validate); one that fails is reported and its default kept.
    const auto stored = [&s](const char* key) { return s.value(QLatin1String(key)).toString().toStdString(); };
    const auto loadOption = [&](std::initializer_list<const char*> keys,
                                const std::function<void(AnalysisOptions&)>& read) {
        if (std::none_of(keys.begin(), keys.end(), [&s](const char* key) { return s.contains(QLatin1String(key)); }))
            return;
        AnalysisOptions candidate = p.analysis;
        try {
            read(candidate);
            validate(candidate);
            p.analysis = candidate;
        } catch (const Error& e) {
            if (problems) problems->push_back(QStringLiteral("%1 (the default is kept)").arg(e.what()));
        }
    };
    loadOption({"rankRelativeTolerance"}, [&](AnalysisOptions& o) {
        if (const std::string text = stored("rankRelativeTolerance"); !text.empty())
            o.spectrum.relativeTolerance = parseNumber(text, "rank tolerance");
    });
    p.analysis.spectrum.spatialOnly = s.value(QStringLiteral("spectrumSpatialOnly"), false).toBool();
    loadOption({"localK"}, [&](AnalysisOptions& o) {
        o.localK = parseIntList(stored("localK"), kMinLocalK, kMaxLocalK, "local mass window sizes");
    });
    loadOption({"tau"},
               [&](AnalysisOptions& o) { o.confusion.tau = parseNumber(stored("tau"), "confusion threshold tau"); });
    loadOption({"queryRelTolerance"}, [&](AnalysisOptions& o) {
        o.confusion.queryRelTolerance = parseNumber(stored("queryRelTolerance"), "distinct-query tolerance");
    });
    loadOption({"confusionFloor"}, [&](AnalysisOptions& o) {
        o.confusion.queryRelativeFloor = parseNumber(stored("confusionFloor"), "confusion query floor");
    });
    loadOption({"magnitudeLog2Min", "magnitudeLog2Max", "magnitudePoints"}, [&](AnalysisOptions& o) {
        if (s.contains(QStringLiteral("magnitudeLog2Min")))
            o.magnitude.log2Min = parseNumber(stored("magnitudeLog2Min"), "magnitude factors");
        if (s.contains(QStringLiteral("magnitudeLog2Max")))
            o.magnitude.log2Max = parseNumber(stored("magnitudeLog2Max"), "magnitude factors");
        if (s.contains(QStringLiteral("magnitudePoints")))
            o.magnitude.points = parseInt(stored("magnitudePoints"), MagnitudeOptions::kMinPoints,
                                          MagnitudeOptions::kMaxPoints, "magnitude factors");
    });
    p.sequentialMap = s.value(QStringLiteral("sequentialMap"), p.sequentialMap).toString();
    p.divergingMap = s.value(QStringLiteral("divergingMap"), p.divergingMap).toString();
    p.nanColor = s.value(QStringLiteral("nanColor"), p.nanColor).value<QColor>();
    p.imageOpacityPercent =
        std::clamp(s.value(QStringLiteral("imageOpacity"), Preferences{}.imageOpacityPercent).toInt(), 0, 100);
    p.localBranch = s.value(QStringLiteral("localBranch"), false).toBool();
    p.localBranchChannel = std::max(-1, s.value(QStringLiteral("localBranchChannel"), -1).toInt());
    s.endGroup();
    if (problems) p.paradigms(problems);  // report bad specs once, at load
    return p;
}

void Preferences::save(QSettings& s) const {
    s.beginGroup(QStringLiteral("preferences"));
    s.setValue(QStringLiteral("paradigms"), paradigmSpecs);
    s.setValue(QStringLiteral("rankRelativeTolerance"), analysis.spectrum.relativeTolerance
                                                            ? QVariant(*analysis.spectrum.relativeTolerance)
                                                            : QVariant(QString()));
    s.setValue(QStringLiteral("spectrumSpatialOnly"), analysis.spectrum.spatialOnly);
    s.setValue(QStringLiteral("localK"), formatKList(analysis.localK));
    s.setValue(QStringLiteral("tau"), analysis.confusion.tau);
    s.setValue(QStringLiteral("queryRelTolerance"), analysis.confusion.queryRelTolerance);
    s.setValue(QStringLiteral("confusionFloor"), analysis.confusion.queryRelativeFloor);
    s.setValue(QStringLiteral("magnitudeLog2Min"), analysis.magnitude.log2Min);
    s.setValue(QStringLiteral("magnitudeLog2Max"), analysis.magnitude.log2Max);
    s.setValue(QStringLiteral("magnitudePoints"), analysis.magnitude.points);
    s.setValue(QStringLiteral("sequentialMap"), sequentialMap);
    s.setValue(QStringLiteral("divergingMap"), divergingMap);
    s.setValue(QStringLiteral("nanColor"), nanColor);
    s.setValue(QStringLiteral("imageOpacity"), imageOpacityPercent);
    s.setValue(QStringLiteral("localBranch"), localBranch);
    s.setValue(QStringLiteral("localBranchChannel"), localBranchChannel);
    s.endGroup();
}

}  // namespace attnlens::gui
