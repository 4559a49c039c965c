// attnlens-cli's command table: the dispatch, the "unknown command" message and --help all come
// from this one list.
#include <string>

#include "attnlens/analysis/registered_statistics.h"
#include "attnlens/analysis/statistics.h"
#include "cli_support.h"

namespace attnlens::cli {

const std::vector<Command>& commands() {
    static const std::vector<Command> table{
        {"inspect",
         R"(  inspect FILE [--json]            layers, heads, B, N, d, grid, prefix, dtypes, optional parts; validates
)",
         cmdInspect},
        {"analyze", R"(  analyze FILE [-o OUT.json] [options]   without -o: the summary table only
      --paradigms LIST             presets and custom paradigms, comma separated (default: all 8 presets)
                                   presets: softmax linear_relu linear_elu focused inline inline_relu mala softmax_l2
                                   custom:  NAME:norm=divide|subtract|magnitude|softmax,kernel=K,transform=T,
                                            p=3,shift=1e-6,slope=0.01,eps=1e-6,c=X,scale=X,seed=N
                                   kernels: identity relu elu1 leaky_relu relu_affine focused
                                   transforms: none l2 confuse_relu confuse_affine
      --config FILE.json           {"paradigms": [...names or paradigm objects...]} adds to --paradigms
      --layers LIST                layer names or positions, e.g. blocks.0,blocks.3 or 0-3 (default all)
      --model LIST                 the layers of these models only (layer names MODEL.BLOCK, see inspect);
                                   with --layers, the layers that both select
      --heads LIST                 e.g. 0,2 or 0-1 (default all)
      --images LIST                e.g. 0-15 (default all)
      --shard K/N                  shard K (0 ... N-1, as SLURM_ARRAY_TASK_ID) of a study of the selected
                                   images cut into N contiguous parts; the report names its study
                                   (selection.study), from which merge knows what is missing
      --skip-existing              -o already holds the report of this same command on this same dump
                                   (whole, with its record table): keep it and exit 0 without work, so
                                   that a resubmitted study redoes only its missing shards
      --stats LIST                 of these, comma separated, or all (default all):
{statistics}
      --threads N                  worker threads (default: all cores)
      --rank-tol X                 rank tolerance relative to sigma_max (default N * 2^-23)
      --spatial-only               spectra of the spatial sub-matrix (prefix rows/columns removed)
      --local-k LIST               window sizes for the local mass (default 3,5,7)
      --tau X                      confusion threshold on ||A_p - A_q||_2 (default 1e-3)
      --confusion-floor D          confused pairs whose queries are also far apart, ||Q_p - Q_q|| >=
                                   D max(||Q_p||, ||Q_q||), counted apart as confused_pairs_far
                                   (non-injectivity rather than continuity; default 0.1)
      --magnitude A:B:N            log2 range and points of the scale factors (default -2:4:13)
      --per-query-maps             include per-query local-mass maps in the JSON
      --distance-ref P             the paradigm the distance statistic compares with (default softmax;
                                   a preset or custom paradigm as in --paradigms): total variation and
                                   Jensen-Shannon of the rows, and ||O - O_ref|| / ||O_ref||, O = A V
      --local-branch own|all|off   layers with a local branch (DWC, InLine residual, LePE): rank and
                                   local mass of E_c = A + M_c per V channel under the layer's own
                                   paradigm (own, default; every paradigm when it names none), under
                                   every paradigm (all), or the branch treated as absent (off)
      --local-channels LIST        V channels within a head to analyse (default all)
      --local-spectra all|none|LIST  channels whose singular values go into the JSON (default all)
      --skip-unreadable            an (image, layer) whose data cannot be read (a damaged chunk) is
                                   skipped with a warning and listed in the report's "skipped"
                                   instead of ending the run (exit 0 when the rest succeeds)
      --no-hash                    skip the input's SHA-256 (for very large dumps)
      --records json|hdf5|none     where the per-record detail goes: the report's "results" (json,
                                   default), a compressed HDF5 table of columns beside the report
                                   (hdf5; OUT.records.h5, or --records-file), or nowhere (none); the
                                   summary (per paradigm, layer, head and label) is always complete,
                                   and merge combines hdf5/none shards in bounded memory
      --records-file PATH          the table of --records hdf5 (default OUT.records.h5)
      --quiet                      no progress on stderr
)",
         cmdAnalyze},
        {"attention",
         R"(  attention FILE --image B --layer L --head H --paradigm P [--values] [--local-branch [--channel C]] -o OUT.json
                                   one head's full attention matrix (and O = A V with --values); with
                                   --local-branch also O + M_c V + bias (output_with_local_branch) and,
                                   with --channel, M_c and E_c = A + M_c of that channel
)",
         cmdAttention},
        {"synth", R"(  synth -o FILE [--layers 2] [--heads 2] [--grid 14x14] [--prefix 1] [--dim 16] [--images 2]
        [--dtype float16|float32|float64] [--seed 1] [--no-values] [--no-images]
        [--local-branch dwc|lepe|inline_residual] [--class-names] [--window M] [--reduction R]
                                   writes a structured synthetic dump (with a seeded local branch;
                                   --class-names: /class_names for its labels, the disk's quadrant;
                                   --window: Swin window attention, M x M windows, odd layers
                                   shifted by M/2 with the mask, a position bias; needs --prefix 0;
                                   a local branch then convolves inside each window, inline_residual
                                   with one kernel per window; --reduction: PVT's spatial reduction,
                                   keys and values on the grid reduced by R, A is N x n)
)",
         cmdSynth},
        {"claims",
         R"(  claims FILE [-o OUT.json] [--images LIST] [--layers LIST] [--model LIST] [--heads LIST] [--threads N] [--quiet]
                                   the three papers' central claims (FLatten, InLine, MALA) as measured
                                   inequalities on the dump's own models, each with its paper, equation
                                   or figure, the models and layers used, the numbers and a verdict:
                                   holds, fails or not_measurable (why); only each layer's own attention
                                   decides, other paradigms on its q, k are labelled what-ifs
                                   (attnlens.claims, resources/claims.schema.json; docs/DEFINITIONS.md "Claims")
)",
         cmdClaims},
        {"sweep",
         R"(  sweep FILE --paradigm P --param NAME=LO:HI:POINTS [-o OUT.json] [analyze's selection and options]
                                   analyze's statistics as curves over one parameter, per layer and head,
                                   each point the mean over the images (attnlens.sweep; docs/DEFINITIONS.md "Sweeps");
                                   NAME: p (focused power), scale (softmax logit scale), c, eps, shift,
                                   slope, qscale (every query's magnitude times a, MALA),
                                   alpha (the local branch's weight, E = A + alpha M_c);
                                   --stats default rank,local,entropy,confusion,distance,locality
                                   (locality: the mean attention distance, as attnlens-cli locality)
)",
         cmdSweep},
        {"merge", R"(  merge A.json [B.json ...] -o OUT.json [--records-file PATH] [--expect-images LIST|all]
        [--allow-partial]
                                   combines analyses of disjoint image ranges of one dump; reports
                                   written with --records hdf5 get their tables concatenated into
                                   PATH (default OUT.records.h5), those with hdf5 or none merge by
                                   their summary states. The merge must cover the images it was
                                   meant to: the shards' study (analyze --shard), else
                                   --expect-images, else every image of the dump; a gap is refused
                                   (exit 3 naming the missing images and shards) unless
      --allow-partial              merges what is there and records the gap in the report's "coverage"
)",
         cmdMerge},
        {"rollout",
         R"(  rollout FILE --image B --query Q|y,x|cls [--layers LIST] [--model M] [--paradigms LIST] [--residual 0.5]
        [--fusion mean|max|min] [--discard 0] [--weights clipped|signed|absolute] [--threads T] [-o OUT.json]
                                   one query's attention rollout through the layers in order, per
                                   paradigm (docs/DEFINITIONS.md "Rollout"); layers must share one token count
)",
         cmdRollout},
        {"confusion",
         R"(  confusion FILE --image B --layer L --head H --paradigm P [--tau 1e-3] [--pairs 20] [-o OUT.json]
                                   one head's confused query pairs (closest rows first) and InLine's
                                   injectivity conditions: rank(phi(K)) and rank([phi(K), 1]) against d
)",
         cmdConfusion},
        {"locality", R"(  locality FILE [-o OUT.json] [--paradigms LIST] [--layers LIST] [--model M] [--images LIST]
        [--threads T] [--offset-radius R|full] [--no-labels] [--skip-unreadable] [--quiet]
                                   mean attention distance and the query-aligned offset map of
                                   every (layer, head, paradigm), over all images and per label,
                                   streamed image by image (docs/DEFINITIONS.md "Locality"); offset maps in the
                                   JSON cropped to |dy|, |dx| <= R (default 3; full: whole maps);
                                   --skip-unreadable: an (image, layer) that cannot be read is left
                                   out (the JSON's "skipped", each cell's "images") instead of
                                   ending the run
)",
         cmdLocality},
    };
    return table;
}

std::string helpText() {
    std::string text = R"(attnlens-cli - attention analysis for vision transformers (softmax vs linear attention)

usage: attnlens-cli COMMAND [options]

commands:
)";
    for (const Command& c : commands()) text += c.help;
    // The statistics from their one table (analysis/statistics.h), registered ones included.
    std::string statistics;
    for (const BuiltInStatistic& b : builtInStatistics())
        statistics += "                                     " + std::string(b.name) +
                      std::string(b.name.size() < 11 ? 11 - b.name.size() : 1, ' ') + std::string(b.summary) + "\n";
    for (const RegisteredStatistic& r : registeredStatistics())
        statistics += "                                     " + r.key +
                      std::string(r.key.size() < 11 ? 11 - r.key.size() : 1, ' ') + r.title + "\n";
    const std::string placeholder = "{statistics}\n";
    for (std::size_t at = text.find(placeholder); at != std::string::npos; at = text.find(placeholder))
        text.replace(at, placeholder.size(), statistics);
    return text + "  --help, --version\n\nexit codes: " + exitCodeText() + "\n";
}

}  // namespace attnlens::cli
