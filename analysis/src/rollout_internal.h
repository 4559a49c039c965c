#pragma once
// For tests only: rolloutRow forms every layer's fused matrix at once up to this many bytes
// (rollout.cpp, kFormedBytes by default), else it steps through each layer's rows in blocks. The
// tests set it to 0 to run the blockwise path at small N. Not thread-safe; set it before rolling out.
namespace attnlens::detail {

double& rolloutFormedBytes();

}  // namespace attnlens::detail
