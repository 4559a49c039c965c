#include <algorithm>

#include "attnlens/dump/dump.h"

namespace attnlens {

std::string modelOfLayer(std::string_view layerName) {
    const auto dot = layerName.find('.');
    return dot == std::string_view::npos ? std::string() : std::string(layerName.substr(0, dot));
}

std::vector<LayerModel> layerModels(const DumpInfo& info) {
    std::vector<LayerModel> models;
    for (std::size_t i = 0; i < info.layers.size(); ++i) {
        const std::string name = modelOfLayer(info.layers[i].name);
        auto it = std::find_if(models.begin(), models.end(), [&](const LayerModel& m) { return m.name == name; });
        if (it == models.end()) it = models.insert(models.end(), LayerModel{name, {}});
        it->layers.push_back(int(i));
    }
    return models;
}

}  // namespace attnlens
