#include "views/claims_view.h"

#include <QComboBox>
#include <QDir>
#include <QEvent>
#include <QFileDialog>
#include <QFontMetrics>
#include <QHBoxLayout>
#include <QLabel>
#include <QMessageBox>
#include <QPushButton>
#include <QSignalBlocker>
#include <cmath>

#include "attnlens/analysis/report.h"
#include "attnlens/io/atomic_file.h"
#include "attnlens/io/error.h"
#include "attnlens/io/text.h"
#include "document/export_folder.h"
#include "document/session.h"
#include "plot/eliding_combo_box.h"
#include "plot/plot_helpers.h"

namespace attnlens::gui {
namespace {

using nlohmann::json;

QString numberText(const json& v) {
    if (v.is_number_integer() || v.is_number_unsigned()) return QString::number(v.get<long long>());
    if (v.is_number()) return QString::number(v.get<double>(), 'g', 3);
    if (v.is_null()) return QStringLiteral("n/a");
    if (v.is_string()) return QString::fromStdString(v.get<std::string>());
    if (v.is_boolean()) return v.get<bool>() ? QStringLiteral("yes") : QStringLiteral("no");
    return QString::fromStdString(v.dump());
}

// A group of records the evidence compares: {"models", "layers", "paradigms", "images", "records"}.
bool isCoverage(const json& v) { return v.is_object() && v.contains("records") && v.contains("models"); }

QString keyText(const std::string& key) { return QString::fromStdString(key); }

// The numbers of an evidence object (no coverage, no rule), in its key order.
QStringList numbersOf(const json& evidence) {
    QStringList parts;
    for (const auto& [key, v] : evidence.items()) {
        if (key == "rule" || key == "reason" || key == "note" || key == "what_if" || isCoverage(v)) continue;
        if (v.is_array() && !v.empty() && v.front().is_number()) {
            parts << QStringLiteral("%1 %2 … %3 (%4)")
                         .arg(keyText(key), numberText(v.front()), numberText(v.back()))
                         .arg(v.size());
        } else if (v.is_array() && !v.empty() && v.front().is_object()) {
            QStringList items;
            for (const json& item : v) {
                QStringList names, fields;  // a layer's name first, then its numbers
                for (const auto& [k, f] : item.items())
                    (f.is_string() ? names : fields)
                        << (f.is_string() ? numberText(f) : keyText(k) + QLatin1Char(' ') + numberText(f));
                items << (names + fields).join(QLatin1Char(' '));
            }
            parts << QStringLiteral("%1: %2").arg(keyText(key), items.join(QStringLiteral("; ")));
        } else if (!v.is_object() && !v.is_array()) {
            parts << keyText(key) + QLatin1Char(' ') + numberText(v);
        }
    }
    return parts;
}

QColor verdictColour(const std::string& verdict) {
    if (verdict == "holds") return QColor(0, 120, 40);
    if (verdict == "fails") return QColor(180, 0, 0);
    return QColor(110, 110, 110);
}

QString verdictWord(const std::string& verdict) {
    if (verdict == "holds") return QStringLiteral("HOLDS");
    if (verdict == "fails") return QStringLiteral("FAILS");
    return QStringLiteral("NOT\nMEASURABLE");
}

}  // namespace

QString claimEvidenceLine(const json& claim) {
    const json& e = claim["evidence"];
    if (claim["verdict"] == "not_measurable") return QStringLiteral("why: ") + numberText(e["reason"]);
    // The models each compared group covers, then the numbers; the rule, the records and the
    // what-if's note are in the hover text (the whole evidence).
    QStringList models;
    for (const auto& [key, v] : e.items())
        if (isCoverage(v)) {
            QStringList names;
            for (const json& m : v["models"]) names << QString::fromStdString(m.get<std::string>());
            models << (key == "trained" ? names.join(QStringLiteral(", "))
                                        : keyText(key) + QStringLiteral(" = ") + names.join(QStringLiteral(", ")));
        }
    QStringList parts = numbersOf(e);
    if (e.contains("what_if"))
        parts << QStringLiteral("what-if, never decides: %1").arg(numbersOf(e["what_if"]).join(QStringLiteral(", ")));
    return QStringLiteral("[%1] %2").arg(models.join(QStringLiteral("; ")), parts.join(QStringLiteral(" · ")));
}

ClaimsView::ClaimsView(Session* session, QWidget* parent) : PlotView(session, parent) {
    scope_ = new ElidingComboBox(this);
    scope_->setObjectName(QStringLiteral("claimsScope"));
    scope_->addItems({QStringLiteral("Selected image"), QStringLiteral("All images (whole dump)")});
    scope_->setCurrentIndex(session->statistics().scope() == StatsScope::AllImages ? 1 : 0);
    toolbar()->addWidget(new QLabel(QStringLiteral("Over:"), this));
    toolbar()->addWidget(scope_);
    connect(scope_, &QComboBox::currentIndexChanged, this, [this](int i) {
        session_->statistics().setScope(i == 1 ? StatsScope::AllImages : StatsScope::CurrentImage);
    });
    retry_ = new QPushButton(QStringLiteral("Retry"), this);
    retry_->setObjectName(QStringLiteral("retryClaims"));
    retry_->setVisible(false);
    save_ = new QPushButton(QStringLiteral("Save JSON…"), this);
    save_->setObjectName(QStringLiteral("saveClaims"));
    save_->setToolTip(QStringLiteral("The claims as attnlens-cli claims writes them (format attnlens.claims)"));
    toolbar()->addWidget(retry_);
    toolbar()->addStretch(1);
    toolbar()->addWidget(save_);
    connect(retry_, &QPushButton::clicked, this, [this]() { session_->statistics().retryClaims(); });
    connect(save_, &QPushButton::clicked, this, [this]() {
        if (!shown_) return;
        const QString path = QFileDialog::getSaveFileName(
            this, QStringLiteral("Save the claims"),
            QDir(lastExportFolder(session_->path()))
                .filePath(QFileInfo(session_->path()).completeBaseName() + QStringLiteral("-claims.json")),
            QStringLiteral("JSON (*.json)"));
        if (path.isEmpty()) return;
        try {
            saveJson(path);
            rememberExportFolder(path);
        } catch (const std::exception& e) {
            QMessageBox::warning(this, QStringLiteral("Save failed"), QString::fromStdString(e.what()));
        }
    });
    connect(plot_, &QCustomPlot::mouseMove, this, [this](QMouseEvent* e) {
        const int row = rowAt(e->position());
        Q_EMIT hoverText(row < 0 ? QString() : rowDetails(row));
    });
    connect(session, &Session::layerReportChanged, this, [this]() {
        QSignalBlocker block(scope_);
        scope_->setCurrentIndex(session_->statistics().scope() == StatsScope::AllImages ? 1 : 0);
        invalidate();
    });
    connect(session, &Session::dumpChanged, this, &PlotView::invalidate);
    connect(session, &Session::selectionChanged, this, [this]() {
        if (session_->statistics().scope() == StatsScope::CurrentImage) invalidate();
    });
}

QString ClaimsView::rowVerdict(int row) const {
    return rows_[std::size_t(row)].verdict->text().replace(QLatin1Char('\n'), QLatin1Char(' '));
}

namespace {

QString claimRowText(const json& c, int detail) {
    const QString reference = numberText(c["paper"]) + QLatin1Char(' ') + numberText(c["reference"]);
    if (detail <= 0) return reference + QStringLiteral(" — ") + numberText(c["id"]);
    const QString statement = reference + QStringLiteral(" — ") + numberText(c["statement"]);
    return detail == 1 ? statement : statement + QLatin1Char('\n') + claimEvidenceLine(c);
}

}  // namespace

QString ClaimsView::rowText(int row) const { return claimRowText(rows_[std::size_t(row)].claim, 2); }

void ClaimsView::setRowTexts() {
    for (Row& r : rows_) setWrappedText(r.text, claimRowText(r.claim, detail_));
}

bool ClaimsView::fitAspect() {
    if (rows_.empty()) return false;
    // Judge a settled layout only: rows whose words or wrapping changed since the last call are laid
    // out again first (their rects are still the old words').
    QStringList shown;
    for (const Row& r : rows_) shown << r.text->text();
    if (shown != laidOut_) {
        laidOut_ = shown;
        return true;
    }
    if (detail_ == 0) return false;
    for (const Row& r : rows_) {
        const int lines = int(r.text->text().count(QLatin1Char('\n'))) + 1;
        const int needed = lines * QFontMetrics(r.text->font()).lineSpacing();
        if (r.text->rect().height() + 2 < needed) {
            --detail_;
            setRowTexts();
            return true;
        }
    }
    return false;
}

bool ClaimsView::eventFilter(QObject* watched, QEvent* e) {
    if (watched == plot_ && e->type() == QEvent::Resize && detail_ < 2 && !rows_.empty()) {
        detail_ = 2;
        setRowTexts();
    }
    return PlotView::eventFilter(watched, e);
}

QString ClaimsView::rowDetails(int row) const {
    const json& c = rows_[std::size_t(row)].claim;
    const json& e = c["evidence"];
    const QString rule = e.contains("rule") ? QStringLiteral(" — rule: ") + numberText(e["rule"]) : QString();
    return QStringLiteral("%1%2 — evidence: %3")
        .arg(numberText(c["id"]), rule, QString::fromStdString(printableText(e.dump(), 2000)));
}

int ClaimsView::rowAt(const QPointF& pos) const {
    for (std::size_t i = 0; i < rows_.size(); ++i) {
        const QRect a = rows_[i].verdict->outerRect(), b = rows_[i].text->outerRect();
        if (a.united(b).contains(pos.toPoint())) return int(i);
    }
    return -1;
}

void ClaimsView::saveJson(const QString& path) const {
    if (!shown_) throwUsage("save claims: no claims are shown");
    writeFileAtomically(path.toStdString(), shown_->dump(1) + "\n", {session_->path().toStdString()});
}

// While the claims are computing, or after they failed or were cancelled: what is going on.
void ClaimsView::showState(const QString& error, bool cancelled) {
    const StatisticsStore& stats = session_->statistics();
    const QString what = QStringLiteral("The papers' claims");
    statusText_ = cancelled          ? QStringLiteral("Cancelled")
                  : !error.isEmpty() ? QStringLiteral("FAILED: ") + error
                  : stats.scope() == StatsScope::AllImages
                      ? QStringLiteral("computing over all %1 images and every layer… (progress below)")
                            .arg(session_->info().images)
                      : QStringLiteral("computing over image %1 and every layer… (progress below)")
                            .arg(session_->selection().image);
    resetWithTitle(plot_, what);
    auto* state = addWrappedText(plot_, 11);
    state->setTextColor(!error.isEmpty() && !cancelled ? QColor(180, 0, 0) : QColor(Qt::black));
    plot_->plotLayout()->addElement(1, 0, state);
    setWrappedText(state, statusText_ + (error.isEmpty() ? QString() : QStringLiteral(" — Retry runs it again.")));
}

// One row per claim: its verdict and its text, in the body grid (returned).
QCPLayoutGrid* ClaimsView::addClaimRows(const json& claims) {
    auto* body = addBody(plot_, 2);
    body->setRowSpacing(2);
    body->setColumnSpacing(6);
    int row = 0;
    for (const json& c : claims) {
        Row r;
        r.claim = c;
        const std::string verdict = c["verdict"].get<std::string>();
        r.verdict = addWrappedText(plot_, 8, true);
        r.verdict->setText(verdictWord(verdict));
        r.verdict->setTextColor(verdictColour(verdict));
        r.verdict->setMinimumSize(QSize(82, 10));
        r.verdict->setMaximumSize(QSize(82, QWIDGETSIZE_MAX));
        body->addElement(row, 0, r.verdict);
        r.text = addWrappedText(plot_, 8);
        r.text->setTextFlags(Qt::AlignLeft | Qt::AlignVCenter);
        body->addElement(row, 1, r.text);
        rows_.push_back(std::move(r));
        ++row;
    }
    return body;
}

void ClaimsView::rebuild() {
    rows_.clear();
    shown_.reset();
    save_->setEnabled(false);
    if (!session_->isOpen()) {
        resetWithTitle(plot_, QString());
        retry_->setVisible(false);
        waiting_ = false;
        return;
    }
    StatisticsStore& stats = session_->statistics();
    const auto claims = stats.claims();
    const QString error = claims ? QString() : stats.claimsError();
    const bool cancelled = !error.isEmpty() && stats.claimsCancelled();
    waiting_ = !claims && error.isEmpty();
    retry_->setVisible(!error.isEmpty());
    if (!claims) {
        showState(error, cancelled);
        return;
    }
    statusText_.clear();
    shown_ = claims;
    save_->setEnabled(true);
    const json& counts = (*claims)["counts"];
    QString title = QStringLiteral("The papers' claims on this dump's models — %1 hold, %2 fail, %3 not measurable")
                        .arg(counts["holds"].get<int>())
                        .arg(counts["fails"].get<int>())
                        .arg(counts["not_measurable"].get<int>());
    resetWithTitle(plot_, title);
    auto* note = addWrappedText(plot_, 8);
    plot_->plotLayout()->addElement(1, 0, note);
    plot_->plotLayout()->setRowStretchFactor(1, 0.01);
    const int images = (*claims)["input"]["images"].get<int>();
    QString noteText = QStringLiteral(
                           "%1, every layer · only each layer's own paradigm (the one its model was trained "
                           "with) decides a verdict; a paradigm applied to another model's q, k is a what-if · "
                           "attnlens-cli claims' definitions · hover a claim for its whole evidence (a small "
                           "window shows fewer words per claim)")
                           .arg(images == 1 && stats.scope() == StatsScope::CurrentImage
                                    ? QStringLiteral("image %1").arg(session_->selection().image)
                                    : QStringLiteral("%1 images").arg(images));
    if (claims->contains("skipped"))
        noteText +=
            QStringLiteral(" · %1 unreadable (image, layer) left out (Issues list)").arg((*claims)["skipped"].size());
    setWrappedText(note, noteText);
    if (claims->contains("skipped")) note->setTextColor(QColor(180, 0, 0));
    QCPLayoutGrid* body = addClaimRows((*claims)["claims"]);
    detail_ = 2;
    setRowTexts();
    body->setColumnStretchFactor(0, 0.01);
    body->setColumnStretchFactor(1, 1);
}

}  // namespace attnlens::gui
