#pragma once
#include <QDialog>

#include "document/preferences.h"

class QPlainTextEdit;
class QLineEdit;
class QCheckBox;
class QComboBox;
class QSpinBox;
class QDoubleSpinBox;
class QLabel;
class QPushButton;

namespace attnlens::gui {

// Edits Preferences; OK validates every field and refuses (with the reason shown) when one is bad.
class PreferencesDialog : public QDialog {
    Q_OBJECT
public:
    PreferencesDialog(const Preferences& prefs, QWidget* parent = nullptr);
    Preferences preferences() const { return result_; }
    // Reads the fields; false with the reason in *error when one is invalid.
    bool collect(Preferences* out, QString* error) const;

    void accept() override;

private:
    QWidget* paradigmsTab(const Preferences& prefs);
    QWidget* analysisTab(const Preferences& prefs);
    QWidget* coloursTab(const Preferences& prefs);
    void restoreDefaults();
    void refreshParadigmList();
    Preferences result_;
    QPlainTextEdit* specs_;
    QLabel* paradigmList_;
    QLineEdit* rankTol_;
    QCheckBox* spatialOnly_;
    QLineEdit* kList_;
    QLineEdit* tau_;
    QLineEdit* queryTol_;
    QLineEdit* confusionFloor_;
    QDoubleSpinBox* log2Min_;
    QDoubleSpinBox* log2Max_;
    QSpinBox* points_;
    QComboBox* sequential_;
    QComboBox* diverging_;
    QPushButton* nanButton_;
    QColor nanColor_;
    QLabel* error_;
};

}  // namespace attnlens::gui
