#pragma once
// File > Export figure: the current view or all views, PNG (with its resolution), SVG or PDF, the
// canvas size (as on screen, or W x H like `render --size`) and the file. The folder, format,
// resolution and size are remembered (QSettings) when the dialog is accepted; the file name is built
// from the selection each time, so that figures of different selections do not overwrite each other.
#include <QDialog>

#include "document/export_folder.h"
#include "shell/figure_export.h"

class QComboBox;
class QLayout;
class QLineEdit;
class QRadioButton;
class QSettings;
class QSpinBox;

namespace attnlens::gui {

// A figure's canvas side in logical pixels: the dialog's and `render --size`'s range.
constexpr int kMinFigureSide = 100;
constexpr int kMaxFigureSide = 20000;

class ExportFigureDialog : public QDialog {
    Q_OBJECT
public:
    // currentViewTitle: the title of the view shown ("" for none). baseName: the file name without
    // extension suggested for the selection ("attnlens-example-mala.block0-h0-q7_7-tokenmap").
    ExportFigureDialog(const QString& currentViewTitle, const QString& baseName, const QString& dumpPath,
                       QWidget* parent = nullptr);
    bool allViews() const;
    QString path() const;
    FigureOptions options() const;
    void accept() override;

private:
    // The size row (as on screen, or width x height), from the last export's settings.
    QLayout* sizeChoice(const QSettings& settings);
    void fixExtension();
    // Sets the format box to the path's extension when it names a format; false when it names none.
    bool followTypedExtension();  // the file's extension follows the format

    QRadioButton* all_ = nullptr;
    QComboBox* format_ = nullptr;
    QSpinBox* dpi_ = nullptr;
    QRadioButton* screenSize_ = nullptr;  // else width_ x height_
    QSpinBox* width_ = nullptr;
    QSpinBox* height_ = nullptr;
    QLineEdit* path_ = nullptr;
};

}  // namespace attnlens::gui
