// DumpWriter (core/dump/dump.h) and the atomic output behind it and every other output file
// (core/io/atomic_file.h): nothing appears at the target before commit(), nothing is left behind
// after a failure or without commit(), and the target's checks.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "attnlens/dump/dump.h"
#include "attnlens/io/atomic_file.h"
#include "attnlens/io/error.h"
#include "core/test_support.h"

namespace attnlens {
namespace {

// The names in `dir`, hidden ones included, sorted.
std::vector<std::string> entriesOf(const std::filesystem::path& dir) {
    std::vector<std::string> names;
    for (const auto& entry : std::filesystem::directory_iterator(dir))
        names.push_back(entry.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
}

// The smallest valid dump: a 1 x 2 grid, one layer "l" of one image and head, d 2.
void writeSmallDump(DumpWriter& w, DType dtype) {
    w.setRootAttribute("format", std::string("attnlens.dump"));
    w.setRootAttribute("format_version", std::int64_t(1));
    w.setRootAttribute("grid", std::vector<std::int64_t>{1, 2});
    w.setRootAttribute("prefix_tokens", std::int64_t(0));
    const std::vector<std::uint64_t> shape{1, 1, 2, 2};
    w.writeFloatDataset("/layers/l/q", shape, std::vector<float>{1, 2, 3, 4}, dtype);
    w.writeFloatDataset("/layers/l/k", shape, std::vector<float>{4, 3, 2, 1}, dtype);
}

std::string contentsOf(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(DumpWriter, CommitRenamesTheTemporaryFileIntoPlace) {
    test::TempDir dir;
    const std::string path = dir.file("out.h5");
    DumpWriter w(path);
    writeSmallDump(w, DType::Float32);
    EXPECT_FALSE(std::filesystem::exists(path));
    ASSERT_EQ(entriesOf(dir.path()).size(), 1u);
    EXPECT_EQ(entriesOf(dir.path())[0].rfind(".out.h5.tmp-", 0), 0u);
    w.commit();
    EXPECT_EQ(entriesOf(dir.path()), std::vector<std::string>{"out.h5"});
    EXPECT_NO_THROW(DumpReader::open(path));
}

TEST(DumpWriter, DestroyedWithoutCommitLeavesNothing) {
    test::TempDir dir;
    const std::string path = dir.file("out.h5");
    {
        DumpWriter w(path);
        writeSmallDump(w, DType::Float32);
    }
    EXPECT_TRUE(entriesOf(dir.path()).empty());
}

TEST(DumpWriter, CommitReplacesAnExistingFile) {
    test::TempDir dir;
    const std::string path = dir.file("out.h5");
    std::ofstream(path) << "old contents";
    DumpWriter w(path);
    writeSmallDump(w, DType::Float64);
    w.commit();
    EXPECT_EQ(DumpReader::open(path)->info().layers[0].qkType, DType::Float64);
}

TEST(DumpWriter, ShapeAndDataSizeMustAgree) {
    test::TempDir dir;
    DumpWriter w(dir.file("out.h5"));
    const std::string message = test::errorMessage(
        [&] {
            w.writeFloatDataset("/x", {2, 3}, std::vector<float>(5), DType::Float32);
        },
        ErrorKind::Usage);
    EXPECT_NE(message.find("/x: shape [2, 3] has 6 elements but 5 values were given"), std::string::npos) << message;
}

TEST(DumpWriter, WriterIntoMissingDirectoryIsAnOutputError) {
    test::TempDir dir;
    const std::string target = dir.file("no/such/dir/out.h5");
    EXPECT_CONTAINS(test::errorMessage([&] { DumpWriter w(target); }, ErrorKind::Output), "does not exist");
}

TEST(DumpWriter, WriterOntoADirectoryIsAnOutputErrorAndLeavesNothing) {
    test::TempDir dir;
    // Used to end in "cannot rename the temporary file into place: Success" (the rename's error
    // code was overwritten by the clean-up) and to leave "<dir>.tmp-<pid>" behind it.
    const std::filesystem::path target = dir.path() / "sub";
    std::filesystem::create_directory(target);
    const std::string message = test::errorMessage(
        [&] {
            DumpWriter w(target.string());
            w.setRootAttribute("format", std::string("attnlens.dump"));
            w.commit();
        },
        ErrorKind::Output);
    EXPECT_CONTAINS(message, "cannot write '" + target.string() + "': it is a directory");
    for (const auto& entry : std::filesystem::directory_iterator(dir.path()))
        EXPECT_EQ(entry.path().filename().string(), "sub") << "left behind: " << entry.path();
}

TEST(AtomicFileWriter, NothingAppearsBeforeCommitAndCommitReplacesTheTarget) {
    test::TempDir dir;
    const std::string path = dir.file("report.json");
    std::ofstream(path) << "old";
    {
        AtomicFileWriter file(path);
        file.append("new ");
        file.append(std::string(3u << 20, 'x'));  // beyond one flush block: written while appending
        EXPECT_EQ(contentsOf(path), "old");
        const auto entries = entriesOf(dir.path());
        ASSERT_EQ(entries.size(), 2u);
        EXPECT_EQ(entries[0].rfind(".report.json.tmp-", 0), 0u) << entries[0];
        file.commit();
    }
    EXPECT_EQ(contentsOf(path), "new " + std::string(3u << 20, 'x'));
    EXPECT_EQ(entriesOf(dir.path()), std::vector<std::string>{"report.json"});
}

TEST(AtomicFileWriter, DestroyedWithoutCommitLeavesTheTargetAsItWas) {
    test::TempDir dir;
    const std::string path = dir.file("out.txt");
    std::ofstream(path) << "kept";
    {
        AtomicFileWriter file(path);
        file.append("lost");
    }
    EXPECT_EQ(contentsOf(path), "kept");
    EXPECT_EQ(entriesOf(dir.path()), std::vector<std::string>{"out.txt"});
}

TEST(AtomicFileWriter, TargetsThatMayNotBeReplacedAreRefusedBeforeAnythingIsWritten) {
    test::TempDir dir;
    const std::string input = dir.file("in.h5");
    std::ofstream(input) << "input";
    EXPECT_NE(test::errorMessage([&] { writeFileAtomically(input, "x", {input}); }, ErrorKind::Output)
                  .find("it is the input file"),
              std::string::npos);
    std::filesystem::create_symlink(input, dir.file("link.json"));
    EXPECT_NE(test::errorMessage([&] { writeFileAtomically(dir.file("link.json"), "x"); }, ErrorKind::Output)
                  .find("symbolic link"),
              std::string::npos);
    EXPECT_NE(test::errorMessage([&] { writeFileAtomically(dir.file("no/such/out.json"), "x"); }, ErrorKind::Output)
                  .find("does not exist"),
              std::string::npos);
    EXPECT_EQ(contentsOf(input), "input");
    EXPECT_EQ(entriesOf(dir.path()), (std::vector<std::string>{"in.h5", "link.json"}));
}

TEST(AtomicFileWriter, AFailedRenameIsAnOutputErrorNamingTheTargetAndLeavesNoTemporaryFile) {
    test::TempDir dir;
    const std::string target = dir.file("taken");
    TemporaryOutputFile output(target);
    std::ofstream(output.temporaryPath()) << "data";
    // The target turns into a non-empty directory after the check: rename(2) must fail.
    std::filesystem::create_directories(std::filesystem::path(target) / "inside");
    const std::string message = test::errorMessage([&] { output.commit(); }, ErrorKind::Output);
    EXPECT_NE(message.find("cannot write '" + target + "'"), std::string::npos) << message;
    EXPECT_EQ(entriesOf(dir.path()), std::vector<std::string>{"taken"});
}

TEST(AtomicFileWriter, TemporaryFilesAreRegisteredForTheSignalHandlersWhileTheyExist) {
    test::TempDir dir;
    {
        AtomicFileWriter file(dir.file("a.json"));
        file.append("x");
        // What a signal handler does: the registered temporary file goes, the target never came.
        EXPECT_EQ(removeRegisteredTemporaryFiles(), 1);
        EXPECT_TRUE(entriesOf(dir.path()).empty());
    }
    EXPECT_EQ(removeRegisteredTemporaryFiles(), 0);  // released with the writer
}

}  // namespace
}  // namespace attnlens
