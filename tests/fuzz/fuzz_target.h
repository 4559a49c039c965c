#pragma once
// The fuzz target shared by both engines (tests/fuzz/README.md): libFuzzer's entry point
// LLVMFuzzerTestOneInput and, for the standalone driver, its counters and hooks.
#include <cstddef>
#include <cstdint>

namespace attnlens::fuzz {

struct Stats {
    std::uint64_t runs = 0;          // inputs given to testOneInput
    std::uint64_t opened = 0;        // DumpReader::open accepted the input
    std::uint64_t valid = 0;         // every bounded read succeeded
    std::uint64_t errors = 0;        // attnlens::Error (expected refusals)
    std::uint64_t reads = 0;         // tensor/image/branch reads that succeeded
    std::uint64_t skippedReads = 0;  // reads skipped because their declared size is above the cap
    std::uint64_t findings = 0;      // in-process findings (non-Error exception, leaked HDF5 ids)
};
extern Stats stats;
// What the target is doing now ("DumpReader::open", "DumpReader::readHead", ...), for crash reports.
extern const char* volatile currentStage;
// Called right before the target abort()s on a finding it detected itself (a non-Error exception,
// leaked HDF5 identifiers); the driver uses it to classify the abort. nullptr under libFuzzer.
extern void (*onInProcessFinding)(char findingClass);  // 'a' our code, 'c' non-Error exception

int testOneInput(const std::uint8_t* data, std::size_t size);

}  // namespace attnlens::fuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);
