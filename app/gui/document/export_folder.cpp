#include "document/export_folder.h"

#include <QDir>
#include <QFileInfo>
#include <QSettings>
#include <QStandardPaths>
#include <QStringList>

#include "document/example_dump.h"

namespace attnlens::gui {

QString lastExportFolder(const QString& dumpPath) {
    const QString stored = QSettings().value(QStringLiteral("export/folder")).toString();
    if (!stored.isEmpty() && QFileInfo(stored).isDir()) return stored;
    // The user's own dump's folder; never the folder of a bundled example (the source or build
    // tree, or the temporary folder of a generated one): figures and sessions are the user's.
    const QString dumpFolder = dumpPath.isEmpty() ? QString() : QFileInfo(dumpPath).absolutePath();
    QStringList bundledPlaces = exampleDumpCandidates();
    bundledPlaces << QDir::temp().filePath(QStringLiteral("x"));
    bool bundled = false;
    for (const QString& example : bundledPlaces) bundled |= QFileInfo(example).absolutePath() == dumpFolder;
    if (!dumpFolder.isEmpty() && !bundled && QFileInfo(dumpFolder).isWritable()) return dumpFolder;
    const QString documents = QStandardPaths::writableLocation(QStandardPaths::DocumentsLocation);
    if (!documents.isEmpty() && QFileInfo(documents).isDir()) return documents;
    return QDir::homePath();
}

void rememberExportFolder(const QString& filePath) {
    QSettings().setValue(QStringLiteral("export/folder"), QFileInfo(filePath).absolutePath());
}

}  // namespace attnlens::gui
