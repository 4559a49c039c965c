#pragma once
// The bundled example dump that `attnlens` opens when started without a file.
#include <QString>
#include <QStringList>

namespace attnlens::gui {

// Where the example may be: next to the executable (installed or build tree) and in the source
// tree (ATTNLENS_SOURCE_DIR), for each file name: attnlens-example.h5, then synthetic-deit-tiny.h5.
QStringList exampleDumpCandidates();
// The first candidate that exists; when none does (a fresh checkout before the example is built),
// a small synthetic DeiT-tiny-like dump written once into the temporary directory. Empty when even
// that fails, with the reason in *error.
QString findOrCreateExampleDump(QString* error = nullptr);
// The bundled hierarchical example (attnlens-example-hierarchical.h5: FLatten-Swin and PVT stages,
// issue 10) in the same places; empty with the places searched in *error when it is not there.
QString findHierarchicalExampleDump(QString* error = nullptr);

}  // namespace attnlens::gui
