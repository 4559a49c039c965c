// How much memory an analysis needs and may use, checked by analyzeDump before anything is
// allocated (CLI and GUI alike): a dump that declares N = 100 000 tokens gets a message, not an
// out-of-memory kill.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>

#include "attnlens/analysis/dump_analysis.h"
#include "attnlens/error.h"

namespace attnlens {

std::string formatGiB(double bytes) {
    char text[32];
    std::snprintf(text, sizeof text, "%.3g GiB", bytes / double(1ull << 30));
    return text;
}

double memoryBudgetBytes() {
    double budget = 0;
    auto consider = [&](double limit, double used) {
        if (limit <= 0) return;
        const double left = std::max(0.0, limit - used);
        budget = budget == 0 ? left : std::min(budget, left);
    };
    double residentBytes = 0, virtualBytes = 0;
    {
        std::ifstream statm("/proc/self/statm");
        double pages = 0, resident = 0;
        if (statm >> pages >> resident) {
            const double page = double(::sysconf(_SC_PAGESIZE));
            virtualBytes = pages * page;
            residentBytes = resident * page;
        }
    }
    const long pages = ::sysconf(_SC_PHYS_PAGES), pageSize = ::sysconf(_SC_PAGESIZE);
    if (pages > 0 && pageSize > 0) consider(double(pages) * double(pageSize), residentBytes);
    auto readLimit = [](const std::string& file) -> double {
        std::ifstream in(file);
        std::string text;
        if (!(in >> text) || text == "max") return 0;
        try {
            const double v = std::stod(text);
            return v > 0 && v < 1e18 ? v : 0;  // cgroup v1 writes a huge number for "none"
        } catch (const std::exception&) {
            return 0;
        }
    };
    std::string cgroup;
    {
        std::ifstream in("/proc/self/cgroup");
        std::string line;
        while (std::getline(in, line))
            if (line.rfind("0::", 0) == 0) cgroup = line.substr(3);
    }
    if (!cgroup.empty()) consider(readLimit("/sys/fs/cgroup" + cgroup + "/memory.max"), residentBytes);
    consider(readLimit("/sys/fs/cgroup/memory.max"), residentBytes);
    consider(readLimit("/sys/fs/cgroup/memory/memory.limit_in_bytes"), residentBytes);
    struct rlimit limit {};
    if (::getrlimit(RLIMIT_AS, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY)
        consider(double(limit.rlim_cur), virtualBytes);
    return budget;
}

double workerBytes(const LayerInfo& layer, const std::vector<Paradigm>& paradigms, const StatSelection& stats,
                   bool localBranch) {
    const double n = double(layer.tokens);
    double copies = 0;
    for (const Paradigm& p : paradigms) {
        const bool lowRank = p.usesKernel();
        const bool dense = stats.local || stats.entropy || (!lowRank && (stats.confusion || stats.rank));
        double c = dense ? 1 : 0;
        if (!lowRank && stats.rank) c += 2;
        else if (!lowRank && stats.confusion) c += 1;  // rows copied when some are flagged
        if (dense && stats.magnitude && layer.tokens <= kSharedRawRowsMaxTokens) c += 1;  // raw rows kept
        // The branch's E_c, its finite-row copy and dgesdd's copy beside A.
        if (localBranch && layer.localBranch && (stats.rank || stats.local)) c = std::max(c, 1.0) + 3;
        copies = std::max(copies, c);
    }
    const double read = double(layer.heads) * n * 2.0 * double(layer.dim) * (8.0 + 8.0);
    return read + copies * n * n * 8.0 + 64.0 * n * 8.0 * 16.0;
}

MemoryPlan planMemory(const DumpInfo& info, const AnalyzeRequest& request, double budgetBytes) {
    MemoryPlan plan;
    const std::vector<Paradigm>& paradigms = request.paradigms.empty() ? presetParadigms() : request.paradigms;
    std::vector<int> layers = request.layers;
    if (layers.empty())
        for (int i = 0; i < int(info.layers.size()); ++i) layers.push_back(i);
    const LayerInfo* largest = nullptr;
    for (int l : layers) {
        if (l < 0 || l >= int(info.layers.size())) continue;  // analyzeDump reports those
        const double bytes = workerBytes(info.layers[std::size_t(l)], paradigms, request.options.stats,
                                         request.options.localBranch.enabled);
        if (bytes > plan.perWorkerBytes) {
            plan.perWorkerBytes = bytes;
            largest = &info.layers[std::size_t(l)];
        }
    }
    plan.budgetBytes = budgetBytes;
    plan.threads = request.threads > 0 ? request.threads : int(std::max(1u, std::thread::hardware_concurrency()));
    if (!largest || budgetBytes <= 0) return plan;
    if (plan.perWorkerBytes > budgetBytes)
        throwInput(info.path + ": layer " + largest->name + " has N = " + std::to_string(largest->tokens) +
                   " tokens: the requested statistics need about " + formatGiB(plan.perWorkerBytes) +
                   " of memory per worker (dense N x N matrices for local mass and entropy, and for softmax "
                   "rank and confusion), more than the " + formatGiB(budgetBytes) +
                   " this process may use; select fewer layers or statistics (for kernel paradigms rank, "
                   "confusion and magnitude need no N x N matrix)");
    if (double(plan.threads) * plan.perWorkerBytes > budgetBytes) {
        const int fit = std::max(1, int(budgetBytes / plan.perWorkerBytes));
        plan.note = "layer " + largest->name + " (N = " + std::to_string(largest->tokens) + ") needs about " +
                    formatGiB(plan.perWorkerBytes) + " per worker; using " + std::to_string(fit) + " thread" +
                    (fit == 1 ? "" : "s") + " instead of " + std::to_string(plan.threads) + " to stay within " +
                    formatGiB(budgetBytes) + " of memory";
        plan.threads = fit;
    }
    return plan;
}

}  // namespace attnlens
