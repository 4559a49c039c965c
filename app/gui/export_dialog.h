#pragma once
// File > Export figure: the current view or all views, PNG (with its resolution), SVG or PDF, and
// the file; the resolution and the path are remembered (QSettings) when the dialog is accepted.
#include <QDialog>

#include "figure_export.h"

class QComboBox;
class QLineEdit;
class QRadioButton;
class QSpinBox;

namespace attnlens::gui {

class ExportFigureDialog : public QDialog {
    Q_OBJECT
public:
    // currentViewTitle: the title of the view shown ("" for none).
    ExportFigureDialog(const QString& currentViewTitle, QWidget* parent = nullptr);
    bool allViews() const;
    QString path() const;
    FigureOptions options() const;
    void accept() override;

private:
    void fixExtension();  // the file's extension follows the format

    QRadioButton* all_ = nullptr;
    QComboBox* format_ = nullptr;
    QSpinBox* dpi_ = nullptr;
    QLineEdit* path_ = nullptr;
};

}  // namespace attnlens::gui
