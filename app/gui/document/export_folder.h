#pragma once
// Where exports, saved sessions and sweeps are offered to go (QSettings "export/folder").
#include <QString>

namespace attnlens::gui {

// The folder exports and saved sessions start in: the last one used, else the open dump's (not a
// bundled example's), else the user's documents, else the home folder.
QString lastExportFolder(const QString& dumpPath);
void rememberExportFolder(const QString& filePath);

}  // namespace attnlens::gui
