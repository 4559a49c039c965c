#include "shell/export_dialog.h"

#include <QButtonGroup>
#include <QComboBox>
#include <QDialogButtonBox>
#include <QDir>
#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QRadioButton>
#include <QSettings>
#include <QSignalBlocker>
#include <QSpinBox>
#include <QStandardPaths>
#include "document/example_dump.h"
#include "document/export_folder.h"
#include "plot/eliding_combo_box.h"

namespace attnlens::gui {

ExportFigureDialog::ExportFigureDialog(const QString& currentViewTitle, const QString& baseName,
                                       const QString& dumpPath, QWidget* parent)
    : QDialog(parent) {
    setWindowTitle(QStringLiteral("Export figure"));
    QSettings settings;
    auto* form = new QFormLayout(this);
    auto* current = new QRadioButton(QStringLiteral("Current view (%1)").arg(currentViewTitle));
    all_ = new QRadioButton(QStringLiteral("All views of the current selection (one file each: NAME-view.ext)"));
    current->setChecked(true);
    auto* which = new QButtonGroup(this);
    which->addButton(current);
    which->addButton(all_);
    format_ = new ElidingComboBox;
    format_->setObjectName(QStringLiteral("format"));
    format_->addItems({QStringLiteral("PNG"), QStringLiteral("SVG"), QStringLiteral("PDF")});
    const QString format = settings.value(QStringLiteral("export/format"), QStringLiteral("PNG")).toString();
    if (format_->findText(format) >= 0) format_->setCurrentText(format);
    dpi_ = new QSpinBox;
    dpi_->setObjectName(QStringLiteral("dpi"));
    dpi_->setRange(48, 1200);
    dpi_->setValue(settings.value(QStringLiteral("export/dpi"), 192).toInt());
    dpi_->setSuffix(QStringLiteral(" dpi"));
    dpi_->setEnabled(format_->currentText() == QStringLiteral("PNG"));

    QLayout* sizeRow = sizeChoice(settings);

    path_ = new QLineEdit(QDir(lastExportFolder(dumpPath)).filePath(baseName + '.' + format_->currentText().toLower()));
    path_->setObjectName(QStringLiteral("path"));
    auto* browse = new QPushButton(QStringLiteral("Browse…"));
    auto* row = new QHBoxLayout;
    row->addWidget(path_, 1);
    row->addWidget(browse);
    form->addRow(current);
    form->addRow(all_);
    form->addRow(QStringLiteral("Format"), format_);
    form->addRow(QStringLiteral("PNG resolution"), dpi_);
    form->addRow(QStringLiteral("Size"), sizeRow);
    form->addRow(QStringLiteral("File"), row);
    auto* buttons = new QDialogButtonBox(QDialogButtonBox::Ok | QDialogButtonBox::Cancel);
    form->addRow(buttons);
    connect(format_, &QComboBox::currentTextChanged, this, &ExportFigureDialog::fixExtension);
    connect(format_, &QComboBox::currentTextChanged, this,
            [this]() { dpi_->setEnabled(format_->currentText() == QStringLiteral("PNG")); });
    connect(browse, &QPushButton::clicked, this, [this]() {
        const QString p = QFileDialog::getSaveFileName(this, QStringLiteral("Export figure"), path_->text(),
                                                       QStringLiteral("PNG (*.png);;SVG (*.svg);;PDF (*.pdf)"));
        if (!p.isEmpty()) {
            path_->setText(p);
            const QString ext = QFileInfo(p).suffix().toUpper();
            if (format_->findText(ext) >= 0) format_->setCurrentText(ext);
        }
    });
    // A typed extension wins over the format box (the box follows it), as a browsed file's does.
    connect(path_, &QLineEdit::textEdited, this, [this]() { followTypedExtension(); });
    connect(buttons, &QDialogButtonBox::accepted, this, &QDialog::accept);
    connect(buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);
}

// The canvas: the view as it is on screen, or a fixed size as `attnlens render --size`.
QLayout* ExportFigureDialog::sizeChoice(const QSettings& settings) {
    screenSize_ = new QRadioButton(QStringLiteral("as on screen"));
    screenSize_->setObjectName(QStringLiteral("screenSize"));
    auto* fixed = new QRadioButton(QStringLiteral("fixed"));
    fixed->setObjectName(QStringLiteral("fixedSize"));
    auto* sizeGroup = new QButtonGroup(this);
    sizeGroup->addButton(screenSize_);
    sizeGroup->addButton(fixed);
    width_ = new QSpinBox;
    width_->setObjectName(QStringLiteral("width"));
    height_ = new QSpinBox;
    height_->setObjectName(QStringLiteral("height"));
    for (QSpinBox* b : {width_, height_}) {
        b->setRange(kMinFigureSide, kMaxFigureSide);
        b->setSuffix(QStringLiteral(" px"));
    }
    const QSize size = settings.value(QStringLiteral("export/size"), QSize()).toSize();
    width_->setValue(size.isValid() ? size.width() : 1100);
    height_->setValue(size.isValid() ? size.height() : 800);
    (size.isValid() ? fixed : screenSize_)->setChecked(true);
    auto* sizeRow = new QHBoxLayout;
    sizeRow->addWidget(screenSize_);
    sizeRow->addWidget(fixed);
    sizeRow->addWidget(width_);
    sizeRow->addWidget(new QLabel(QStringLiteral("×")));
    sizeRow->addWidget(height_);
    sizeRow->addStretch(1);
    auto enableSize = [this]() {
        width_->setEnabled(!screenSize_->isChecked());
        height_->setEnabled(!screenSize_->isChecked());
    };
    connect(screenSize_, &QRadioButton::toggled, this, enableSize);
    enableSize();
    return sizeRow;
}

bool ExportFigureDialog::followTypedExtension() {
    const QString ext = QFileInfo(path_->text()).suffix().toUpper();
    if (format_->findText(ext) < 0) return false;
    if (format_->currentText() != ext) {
        const QSignalBlocker keepText(format_);  // the path stays as typed
        format_->setCurrentText(ext);
        dpi_->setEnabled(ext == QStringLiteral("PNG"));
    }
    return true;
}

void ExportFigureDialog::fixExtension() {
    const QFileInfo fi(path_->text());
    path_->setText(fi.dir().filePath(fi.completeBaseName() + '.' + format_->currentText().toLower()));
}

bool ExportFigureDialog::allViews() const { return all_->isChecked(); }

QString ExportFigureDialog::path() const { return path_->text(); }

FigureOptions ExportFigureDialog::options() const {
    FigureOptions options;
    options.dpi = dpi_->value();
    if (!screenSize_->isChecked()) options.size = QSize(width_->value(), height_->value());
    return options;
}

void ExportFigureDialog::accept() {
    // "all.pdf" writes PDF whatever the box said; a name without a known extension gets the box's.
    if (!followTypedExtension()) fixExtension();
    QSettings settings;
    settings.setValue(QStringLiteral("export/dpi"), dpi_->value());
    settings.setValue(QStringLiteral("export/format"), format_->currentText());
    settings.setValue(QStringLiteral("export/size"),
                      screenSize_->isChecked() ? QSize() : QSize(width_->value(), height_->value()));
    rememberExportFolder(path_->text());
    QDialog::accept();
}

}  // namespace attnlens::gui
