#pragma once
// How the views and exports name things in titles and messages: tokens, key grids, layer layouts,
// prefix tokens, errors shortened to the dump's file name, wrapped lines.
#include <QString>
#include <span>
#include <vector>

#include "attnlens/attention/paradigm.h"
#include "attnlens/attention/token_layout.h"
#include "attnlens/dump/dump.h"

namespace attnlens::gui {

QString tokenName(const TokenLayout& layout, Index token);  // "(y 3, x 5)" or "CLS"
// " of the 7 x 7 key grid" under spatial reduction (after a key's tokenName), "" otherwise.
QString keyGridNote(const AttentionLayout& layout);
// A layer's token layout in a few characters: "28x28", "28x28 → keys 7x7", "56x56, 7x7 windows".
QString layerLayoutLabel(const LayerInfo& layer);
QString prefixName(int prefix, int count);  // CLS, DIST, REG1...
// An error for display in a view: the dump's path replaced by its file name.
QString shortError(const QString& error, const QString& dumpPath);
// Breaks text at spaces into lines of at most `width` characters (a longer word keeps its line).
QString wrapText(const QString& text, int width);
// The views' inline message when the local branch's weights could not be read (wrapped lines).
QString branchErrorNote(const QString& error, const QString& dumpPath, int width = 96);
// Layers that hold Q and K after their model's kernel (kernel_applied) use the identity kernel
// under every paradigm, so paradigms that differ only in their kernel draw the same thing there.
// Says which of `layers` do and which of `paradigms` it changes; "" when none is concerned.
QString kernelAppliedNote(const DumpInfo& info, std::span<const int> layers, std::span<const Paradigm> paradigms);

}  // namespace attnlens::gui
