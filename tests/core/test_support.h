#pragma once
// Shared test helpers: a temporary directory removed at the end of the test, and a check that a
// call throws attnlens::Error of a given kind whose message contains a given text.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <functional>
#include <string>
#include <system_error>

#include "attnlens/io/error.h"

namespace attnlens::test {

class TempDir {
public:
    TempDir() {
        std::string pattern = (std::filesystem::temp_directory_path() / "attnlens-test-XXXXXX").string();
        if (::mkdtemp(pattern.data()) == nullptr) {
            throw std::runtime_error("mkdtemp failed for " + pattern);
        }
        path_ = pattern;
    }
    ~TempDir() {
        std::error_code ignored;
        std::filesystem::remove_all(path_, ignored);
    }
    TempDir(const TempDir&) = delete;
    TempDir& operator=(const TempDir&) = delete;

    const std::filesystem::path& path() const { return path_; }
    // A path inside the directory, as a string.
    std::string file(const std::string& name) const { return (path_ / name).string(); }

private:
    std::filesystem::path path_;
};

// Runs `call` and returns the message of the attnlens::Error it throws; fails the test when it
// throws nothing, something else, or an Error of another kind.
inline std::string errorMessage(const std::function<void()>& call, ErrorKind expected = ErrorKind::Input) {
    try {
        call();
    } catch (const Error& e) {
        EXPECT_EQ(int(e.kind()), int(expected)) << "message: " << e.what();
        return e.what();
    } catch (const std::exception& e) {
        ADD_FAILURE() << "threw a non-attnlens exception: " << e.what();
        return {};
    }
    ADD_FAILURE() << "expected an attnlens::Error, nothing was thrown";
    return {};
}

}  // namespace attnlens::test
