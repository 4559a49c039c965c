#include "document/selection.h"

#include "attnlens/io/name_table.h"
#include "attnlens/io/text.h"

namespace attnlens::gui {
namespace {

constexpr NameTable<MapContent, 3> kMapContentNames{{{{MapContent::Attention, "attention"},
                                                      {MapContent::RolloutOfQuery, "rollout-query"},
                                                      {MapContent::RolloutOfCls, "rollout-cls"}}}};

}  // namespace

std::string_view toString(MapContent content) { return kMapContentNames.name(content); }
MapContent parseMapContent(std::string_view s) { return kMapContentNames.parse(s, "map"); }

const DumpInfo& SelectionContext::info() const {
    static const DumpInfo empty;
    const auto r = reader();
    return r ? r->info() : empty;
}

const LayerInfo& SelectionContext::layerInfo() const {
    static const LayerInfo empty;
    const auto& layers = info().layers;
    const int layer = selection().layer;
    if (layer < 0 || layer >= int(layers.size())) return empty;
    return layers[std::size_t(layer)];
}

int SelectionContext::paradigmIndex(const std::string& name) const {
    const std::vector<Paradigm>& list = paradigms();
    for (std::size_t i = 0; i < list.size(); ++i)
        if (list[i].name == name) return int(i);
    return -1;
}

int SelectionContext::layerParadigm(int layer) const {
    if (!isOpen()) return -1;
    if (layer < 0) layer = selection().layer;
    if (layer >= int(info().layers.size())) return -1;
    const std::string& attention = info().layers[std::size_t(layer)].attention;
    return attention.empty() ? -1 : paradigmIndex(attention);
}

QString SelectionContext::paradigmLabel(int paradigm) const {
    const std::vector<Paradigm>& list = paradigms();
    if (paradigm < 0 || paradigm >= int(list.size())) return QString();
    const QString name = QString::fromStdString(list[std::size_t(paradigm)].name);
    if (!isOpen()) return name;
    const std::string& attention = layerInfo().attention;
    if (attention.empty() || attention == list[std::size_t(paradigm)].name) return name;
    return QStringLiteral("%1 (model: %2)").arg(name, QString::fromStdString(attention));
}

std::string SelectionContext::paradigmKey(int paradigm) const {
    return paradigms().at(std::size_t(paradigm)).toJson().dump();
}

std::string SelectionContext::layerModel(int layer) const {
    if (!isOpen()) return {};
    if (layer < 0) layer = selection().layer;
    if (layer >= int(info().layers.size())) return {};
    return modelOfLayer(info().layers[std::size_t(layer)].name);
}

std::vector<int> SelectionContext::modelLayers(const std::string& model) const {
    for (const LayerModel& m : layerModels(info()))
        if (m.name == model) return m.layers;
    return {};
}

std::string SelectionContext::layerWhere() const {
    const Selection& s = selection();
    return printableText(info().path) + ": image " + std::to_string(s.image) + ", layer " + layerInfo().name +
           ", head " + std::to_string(s.head);
}

}  // namespace attnlens::gui
