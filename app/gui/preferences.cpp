#include "preferences.h"

#include <QStringList>

#include "attnlens/error.h"

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

std::vector<int> parseKList(const QString& text, QString* error) {
    std::vector<int> ks;
    for (const QString& part : text.split(',', Qt::SkipEmptyParts)) {
        bool ok = false;
        const int k = part.trimmed().toInt(&ok);
        if (!ok || k < 1 || k % 2 == 0) {
            if (error) *error = QStringLiteral("k list: \"%1\" is not an odd positive integer").arg(part.trimmed());
            return {};
        }
        ks.push_back(k);
    }
    if (ks.empty() && error) *error = QStringLiteral("k list is empty");
    return ks;
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
    const QVariant relTol = s.value(QStringLiteral("rankRelativeTolerance"));
    if (relTol.isValid() && !relTol.toString().isEmpty()) {
        bool ok = false;
        const double v = relTol.toDouble(&ok);
        if (ok && v > 0) p.analysis.spectrum.relativeTolerance = v;
    }
    p.analysis.spectrum.spatialOnly = s.value(QStringLiteral("spectrumSpatialOnly"), false).toBool();
    QString kError;
    const auto ks = parseKList(s.value(QStringLiteral("localK"), QStringLiteral("3,5,7")).toString(), &kError);
    if (!ks.empty()) {
        p.analysis.localK = ks;
    } else if (problems) {
        problems->push_back(kError);
    }
    p.analysis.confusion.tau = s.value(QStringLiteral("tau"), p.analysis.confusion.tau).toDouble();
    if (!(p.analysis.confusion.tau > 0)) p.analysis.confusion.tau = 1e-3;
    p.analysis.confusion.queryRelTolerance =
        s.value(QStringLiteral("queryRelTolerance"), p.analysis.confusion.queryRelTolerance).toDouble();
    p.analysis.magnitude.log2Min = s.value(QStringLiteral("magnitudeLog2Min"), p.analysis.magnitude.log2Min).toDouble();
    p.analysis.magnitude.log2Max = s.value(QStringLiteral("magnitudeLog2Max"), p.analysis.magnitude.log2Max).toDouble();
    p.analysis.magnitude.points = s.value(QStringLiteral("magnitudePoints"), p.analysis.magnitude.points).toInt();
    if (p.analysis.magnitude.points < 2 || p.analysis.magnitude.log2Max <= p.analysis.magnitude.log2Min) {
        p.analysis.magnitude = MagnitudeOptions{};
        if (problems) problems->push_back(QStringLiteral("magnitude grid reset to the default 2^-2..2^4, 13 points"));
    }
    p.sequentialMap = s.value(QStringLiteral("sequentialMap"), p.sequentialMap).toString();
    p.divergingMap = s.value(QStringLiteral("divergingMap"), p.divergingMap).toString();
    p.nanColor = s.value(QStringLiteral("nanColor"), p.nanColor).value<QColor>();
    p.imageOpacityPercent = std::clamp(s.value(QStringLiteral("imageOpacity"), 0).toInt(), 0, 100);
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
