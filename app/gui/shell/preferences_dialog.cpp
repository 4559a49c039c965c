#include "shell/preferences_dialog.h"

#include <QCheckBox>
#include <QColorDialog>
#include <QComboBox>
#include <QDialogButtonBox>
#include <QDoubleSpinBox>
#include <QFormLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QScrollArea>
#include <QSpinBox>
#include <QTabWidget>
#include <QVBoxLayout>
#include <utility>

#include "attnlens/dump/list_parser.h"
#include "attnlens/io/error.h"
#include "plot/color_maps.h"
#include "plot/eliding_combo_box.h"

namespace attnlens::gui {
namespace {

std::string fieldText(const QLineEdit* field) { return field->text().trimmed().toStdString(); }

void setSwatch(QPushButton* b, const QColor& c) {
    b->setText(c.name());
    b->setStyleSheet(QStringLiteral("background:%1; color:%2").arg(c.name(), c.lightnessF() > 0.5 ? "black" : "white"));
}

}  // namespace

PreferencesDialog::PreferencesDialog(const Preferences& prefs, QWidget* parent)
    : QDialog(parent), result_(prefs), nanColor_(prefs.nanColor) {
    setWindowTitle(QStringLiteral("AttnLens Preferences"));
    auto* tabs = new QTabWidget(this);

    tabs->addTab(paradigmsTab(prefs), QStringLiteral("Paradigms"));
    tabs->addTab(analysisTab(prefs), QStringLiteral("Analysis"));
    tabs->addTab(coloursTab(prefs), QStringLiteral("Colours"));

    error_ = new QLabel;
    error_->setStyleSheet(QStringLiteral("color: #b00000"));
    error_->setWordWrap(true);
    auto* buttons =
        new QDialogButtonBox(QDialogButtonBox::Ok | QDialogButtonBox::Cancel | QDialogButtonBox::RestoreDefaults);
    connect(buttons, &QDialogButtonBox::accepted, this, &PreferencesDialog::accept);
    connect(buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);
    connect(buttons->button(QDialogButtonBox::RestoreDefaults), &QPushButton::clicked, this,
            &PreferencesDialog::restoreDefaults);
    auto* layout = new QVBoxLayout(this);
    layout->addWidget(tabs);
    layout->addWidget(error_);
    layout->addWidget(buttons);
    resize(720, 520);
    refreshParadigmList();
}

// The paradigm definitions, one per line, and the paradigms they make.
QWidget* PreferencesDialog::paradigmsTab(const Preferences& prefs) {
    auto* pw = new QWidget;
    auto* pl = new QVBoxLayout(pw);
    pl->addWidget(new QLabel(QStringLiteral(
        "One definition per line, in the form of attnlens-cli --paradigms: NAME:key=value,...\n"
        "keys: norm (softmax|divide|subtract|magnitude), kernel, transform, p, shift, slope, eps, c, scale, seed.\n"
        "A preset's name replaces that preset (e.g. focused:norm=divide,kernel=focused,p=2); lines starting with # are "
        "ignored.")));
    specs_ = new QPlainTextEdit;
    specs_->setObjectName(QStringLiteral("paradigmSpecs"));
    specs_->setPlainText(prefs.paradigmSpecs.join('\n'));
    pl->addWidget(specs_, 1);
    paradigmList_ = new QLabel;
    paradigmList_->setWordWrap(true);
    paradigmList_->setTextInteractionFlags(Qt::TextSelectableByMouse);
    auto* scroll = new QScrollArea;
    scroll->setWidget(paradigmList_);
    scroll->setWidgetResizable(true);
    pl->addWidget(new QLabel(QStringLiteral("Resulting paradigms:")));
    pl->addWidget(scroll, 1);
    connect(specs_, &QPlainTextEdit::textChanged, this, &PreferencesDialog::refreshParadigmList);
    return pw;
}

// The analysis options, each field named by the attnlens-cli option that sets it.
QWidget* PreferencesDialog::analysisTab(const Preferences& prefs) {
    auto* aw = new QWidget;
    auto* form = new QFormLayout(aw);
    const AnalysisOptions& a = prefs.analysis;
    rankTol_ = new QLineEdit(a.spectrum.relativeTolerance ? QString::number(*a.spectrum.relativeTolerance, 'g', 6)
                                                          : QString());
    rankTol_->setObjectName(QStringLiteral("rankTolerance"));
    rankTol_->setPlaceholderText(QStringLiteral("default: N · 2^-23 (float32 resolution)"));
    form->addRow(QStringLiteral("Rank tolerance (relative to σ_max)"), rankTol_);
    spatialOnly_ =
        new QCheckBox(QStringLiteral("Spectra of the spatial sub-matrix only (prefix rows/columns removed)"));
    spatialOnly_->setChecked(a.spectrum.spatialOnly);
    form->addRow(QString(), spatialOnly_);
    kList_ = new QLineEdit(formatKList(a.localK));
    kList_->setObjectName(QStringLiteral("localK"));
    form->addRow(QStringLiteral("Local window sizes k (odd)"), kList_);
    tau_ = new QLineEdit(QString::number(a.confusion.tau, 'g', 6));
    tau_->setObjectName(QStringLiteral("tau"));
    form->addRow(QStringLiteral("Confusion τ (‖A_p − A_q‖₂ < τ)"), tau_);
    queryTol_ = new QLineEdit(QString::number(a.confusion.queryRelTolerance, 'g', 6));
    queryTol_->setObjectName(QStringLiteral("queryTolerance"));
    form->addRow(QStringLiteral("Distinct-query tolerance (relative)"), queryTol_);
    confusionFloor_ = new QLineEdit(QString::number(a.confusion.queryRelativeFloor, 'g', 6));
    confusionFloor_->setObjectName(QStringLiteral("confusionFloor"));
    form->addRow(QStringLiteral("Confused pairs \"far\": ‖Q_p − Q_q‖ ≥ D · max ‖Q‖, D"), confusionFloor_);
    log2Min_ = new QDoubleSpinBox;
    log2Max_ = new QDoubleSpinBox;
    for (auto* s : {log2Min_, log2Max_}) {
        s->setRange(-MagnitudeOptions::kLog2Limit, MagnitudeOptions::kLog2Limit);
        s->setDecimals(2);
    }
    log2Min_->setValue(a.magnitude.log2Min);
    log2Max_->setValue(a.magnitude.log2Max);
    points_ = new QSpinBox;
    points_->setRange(MagnitudeOptions::kMinPoints, MagnitudeOptions::kMaxPoints);
    points_->setValue(a.magnitude.points);
    form->addRow(QStringLiteral("Magnitude factors: log2 a from"), log2Min_);
    form->addRow(QStringLiteral("to"), log2Max_);
    form->addRow(QStringLiteral("points"), points_);
    // Each field names the attnlens-cli option that sets the same definition.
    for (const auto& [field, option] : {std::pair<QWidget*, const char*>{rankTol_, "--rank-tol"},
                                        {kList_, "--local-k"},
                                        {tau_, "--tau"},
                                        {confusionFloor_, "--confusion-floor"},
                                        {log2Min_, "--magnitude"},
                                        {log2Max_, "--magnitude"},
                                        {points_, "--magnitude"}})
        field->setToolTip(QStringLiteral("attnlens-cli %1").arg(QLatin1String(option)));
    return aw;
}

// The colour maps and the colour of non-finite cells.
QWidget* PreferencesDialog::coloursTab(const Preferences& prefs) {
    auto* cw = new QWidget;
    auto* cf = new QFormLayout(cw);
    sequential_ = new ElidingComboBox;
    sequential_->addItems(sequentialMapNames());
    sequential_->setCurrentText(prefs.sequentialMap);
    diverging_ = new ElidingComboBox;
    diverging_->addItems(divergingMapNames());
    diverging_->setCurrentText(prefs.divergingMap);
    nanButton_ = new QPushButton;
    setSwatch(nanButton_, nanColor_);
    connect(nanButton_, &QPushButton::clicked, this, [this]() {
        const QColor c = QColorDialog::getColor(nanColor_, this, QStringLiteral("Colour of NaN / Inf cells"));
        if (c.isValid()) {
            nanColor_ = c;
            setSwatch(nanButton_, c);
        }
    });
    cf->addRow(QStringLiteral("Non-negative weights"), sequential_);
    cf->addRow(QStringLiteral("Signed weights (centred on 0)"), diverging_);
    cf->addRow(QStringLiteral("NaN / Inf cells"), nanButton_);
    return cw;
}

void PreferencesDialog::restoreDefaults() {
    const Preferences d;
    specs_->clear();
    rankTol_->clear();
    spatialOnly_->setChecked(false);
    kList_->setText(formatKList(d.analysis.localK));
    tau_->setText(QString::number(d.analysis.confusion.tau, 'g', 6));
    queryTol_->setText(QString::number(d.analysis.confusion.queryRelTolerance, 'g', 6));
    confusionFloor_->setText(QString::number(d.analysis.confusion.queryRelativeFloor, 'g', 6));
    log2Min_->setValue(d.analysis.magnitude.log2Min);
    log2Max_->setValue(d.analysis.magnitude.log2Max);
    points_->setValue(d.analysis.magnitude.points);
    sequential_->setCurrentText(d.sequentialMap);
    diverging_->setCurrentText(d.divergingMap);
    nanColor_ = d.nanColor;
    setSwatch(nanButton_, nanColor_);
}

void PreferencesDialog::refreshParadigmList() {
    Preferences p = result_;
    p.paradigmSpecs = specs_->toPlainText().split('\n');
    QStringList problems;
    QStringList lines;
    for (const Paradigm& para : p.paradigms(&problems))
        lines << QStringLiteral("<b>%1</b>: <code>%2</code>")
                     .arg(QString::fromStdString(para.name).toHtmlEscaped(),
                          QString::fromStdString(para.toJson().dump()).toHtmlEscaped());
    for (const QString& prob : problems)
        lines << QStringLiteral("<span style='color:#b00000'>%1</span>").arg(prob.toHtmlEscaped());
    paradigmList_->setText(lines.join(QStringLiteral("<br>")));
}

bool PreferencesDialog::collect(Preferences* out, QString* error) const {
    Preferences p = result_;
    p.paradigmSpecs.clear();
    for (const QString& line : specs_->toPlainText().split('\n'))
        if (!line.trimmed().isEmpty()) p.paradigmSpecs << line.trimmed();
    QStringList problems;
    p.paradigms(&problems);
    if (!problems.isEmpty()) {
        *error = problems.join('\n');
        return false;
    }
    // The fields are read by the parsers and checked by the rule of attnlens-cli (list_parser.h,
    // validate), whose messages name the option as the command line does.
    try {
        AnalysisOptions& a = p.analysis;
        if (const std::string tol = fieldText(rankTol_); tol.empty())
            a.spectrum.relativeTolerance.reset();
        else
            a.spectrum.relativeTolerance = parseNumber(tol, "rank tolerance");
        a.spectrum.spatialOnly = spatialOnly_->isChecked();
        a.localK = parseIntList(fieldText(kList_), kMinLocalK, kMaxLocalK, "local mass window sizes");
        a.confusion.tau = parseNumber(fieldText(tau_), "confusion threshold tau");
        a.confusion.queryRelTolerance = parseNumber(fieldText(queryTol_), "distinct-query tolerance");
        a.confusion.queryRelativeFloor = parseNumber(fieldText(confusionFloor_), "confusion query floor");
        a.magnitude.log2Min = log2Min_->value();
        a.magnitude.log2Max = log2Max_->value();
        a.magnitude.points = points_->value();
        validate(a);
    } catch (const Error& e) {
        *error = QString::fromStdString(e.what());
        return false;
    }
    p.sequentialMap = sequential_->currentText();
    p.divergingMap = diverging_->currentText();
    p.nanColor = nanColor_;
    *out = p;
    return true;
}

void PreferencesDialog::accept() {
    QString error;
    Preferences p;
    if (!collect(&p, &error)) {
        error_->setText(error);
        return;
    }
    result_ = p;
    QDialog::accept();
}

}  // namespace attnlens::gui
