#include "export_dialog.h"

#include <QComboBox>
#include <QDialogButtonBox>
#include <QDir>
#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QLineEdit>
#include <QPushButton>
#include <QRadioButton>
#include <QSettings>
#include <QSpinBox>

namespace attnlens::gui {

ExportFigureDialog::ExportFigureDialog(const QString& currentViewTitle, QWidget* parent) : QDialog(parent) {
    setWindowTitle(QStringLiteral("Export figure"));
    auto* form = new QFormLayout(this);
    auto* current = new QRadioButton(QStringLiteral("Current view (%1)").arg(currentViewTitle));
    all_ = new QRadioButton(QStringLiteral("All views of the current selection (one file each: NAME-view.ext)"));
    current->setChecked(true);
    format_ = new QComboBox;
    format_->addItems({QStringLiteral("PNG"), QStringLiteral("SVG"), QStringLiteral("PDF")});
    dpi_ = new QSpinBox;
    dpi_->setRange(48, 1200);
    dpi_->setValue(QSettings().value(QStringLiteral("export/dpi"), 192).toInt());
    dpi_->setSuffix(QStringLiteral(" dpi"));
    path_ = new QLineEdit(
        QSettings()
            .value(QStringLiteral("export/path"), QDir::home().filePath(QStringLiteral("attnlens-figure.png")))
            .toString());
    auto* browse = new QPushButton(QStringLiteral("Browse…"));
    auto* row = new QHBoxLayout;
    row->addWidget(path_, 1);
    row->addWidget(browse);
    form->addRow(current);
    form->addRow(all_);
    form->addRow(QStringLiteral("Format"), format_);
    form->addRow(QStringLiteral("PNG resolution"), dpi_);
    form->addRow(QStringLiteral("File"), row);
    auto* buttons = new QDialogButtonBox(QDialogButtonBox::Ok | QDialogButtonBox::Cancel);
    form->addRow(buttons);
    format_->setCurrentText(QFileInfo(path_->text()).suffix().toUpper());
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
    connect(buttons, &QDialogButtonBox::accepted, this, &QDialog::accept);
    connect(buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);
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
    return options;
}

void ExportFigureDialog::accept() {
    fixExtension();
    QSettings().setValue(QStringLiteral("export/dpi"), dpi_->value());
    QSettings().setValue(QStringLiteral("export/path"), path_->text());
    QDialog::accept();
}

}  // namespace attnlens::gui
