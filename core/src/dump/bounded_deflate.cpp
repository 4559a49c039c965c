// HDF5's deflate filter with a bound: a chunk inflates to at most its declared size.
//
// HDF5 1.10's own filter (H5Z__filter_deflate) doubles its output buffer until the stream ends, so
// one chunk of a few MB that inflates to 3 GB of zeros (a decompression bomb, or a damaged stream)
// takes gigabytes and tens of seconds before anything can look at it, and the reader then sees the
// chunk as data. The deflate output of a chunk is the chunk: its declared dimensions times the
// stored element size (shuffle keeps the size; nbit and scale-offset come after deflate when
// reading and only expand). So reads run with that size as the limit (ChunkReadLimit, set by
// readHyperslab) and a stream that would go beyond it fails at once, naming the size, with memory
// bounded by the chunk. The limit is the chunk's size plus kFletcherSlack (a fletcher32 checksum
// placed before deflate in the pipeline stays inside the stream).
//
// HDF5 refuses H5Zregister for its predefined filters, so the replacement goes through the
// library's internal H5Z_register (exported by Debian's libhdf5, found with dlsym); without it the
// library's own filter stays in place (h5::boundedDeflateInstalled() says which). Compression is
// HDF5's, byte for byte (compress2 at the dataset's level), so files written are unchanged.
#include <dlfcn.h>
#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <mutex>
#include <string>

#include "hdf5_util.h"

namespace attnlens::h5 {

namespace {

constexpr std::size_t kFletcherSlack = 4;
// The limit of a read whose chunk size is unknown (no readHyperslab around it): HDF5's own chunks
// are at most 4 GiB; the project's largest are a few MB.
constexpr std::size_t kUnknownChunkLimit = std::size_t(1) << 30;

thread_local std::size_t tlsChunkLimit = 0;
// The chunk's size when the pipeline holds only deflate, shuffle and fletcher32, whose inflated
// output is the whole chunk: a shorter stream leaves part of the chunk unwritten (it would be read
// as whatever the buffer held). 0 when other filters (nbit, scale-offset) expand it afterwards.
thread_local std::size_t tlsChunkExact = 0;
thread_local std::string tlsFailure;

bool gInstalled = false;

// Inflates the chunk in *buf into a buffer of at most the chunk's size (HDF5's filter interface:
// the bytes produced, 0 with tlsFailure set on failure).
size_t inflateBounded(size_t nbytes, size_t* bufSize, void** buf) {
    // A read of ours knows the chunk's size: one buffer of that size. Another read (h5py in
    // the same process as the Python module) does not: the buffer grows as HDF5's does, up to
    // kUnknownChunkLimit.
    const bool known = tlsChunkLimit > 0;
    const std::size_t limit = (known ? tlsChunkLimit : kUnknownChunkLimit) + kFletcherSlack;
    std::size_t allocated = known ? limit : std::min(limit, std::max<std::size_t>(*bufSize, 4096) * 2);
    auto* out = static_cast<Bytef*>(H5allocate_memory(allocated, false));
    if (out == nullptr) {
        tlsFailure = "no memory to inflate a chunk of " + std::to_string(allocated) + " bytes";
        return 0;
    }
    z_stream stream{};
    stream.next_in = static_cast<Bytef*>(*buf);
    stream.avail_in = uInt(std::min<std::size_t>(nbytes, std::numeric_limits<uInt>::max()));
    stream.next_out = out;
    stream.avail_out = uInt(std::min<std::size_t>(allocated, std::numeric_limits<uInt>::max()));
    if (inflateInit(&stream) != Z_OK) {
        H5free_memory(out);
        tlsFailure = "zlib could not start inflating";
        return 0;
    }
    const auto fail = [&](std::string why) -> size_t {
        inflateEnd(&stream);
        H5free_memory(out);
        tlsFailure = std::move(why);
        return 0;
    };
    for (;;) {
        const int status = inflate(&stream, Z_SYNC_FLUSH);
        if (status == Z_STREAM_END) break;
        if (status == Z_OK && stream.avail_out == 0 && allocated < limit) {
            const std::size_t grown = std::min(limit, allocated * 2);
            auto* bigger = static_cast<Bytef*>(H5resize_memory(out, grown));
            if (bigger == nullptr) return fail("no memory to inflate a chunk of " + std::to_string(grown) + " bytes");
            out = bigger;
            stream.next_out = out + stream.total_out;
            stream.avail_out = uInt(std::min<std::size_t>(grown - stream.total_out, std::numeric_limits<uInt>::max()));
            allocated = grown;
            continue;
        }
        if (status == Z_OK && stream.avail_out == 0)
            return fail("a compressed chunk inflates beyond its declared size of " +
                        std::to_string(limit - kFletcherSlack) + " bytes: the chunk is damaged");
        if (status != Z_OK)
            return fail("a compressed chunk is damaged: inflate() failed (zlib: " +
                        std::string(stream.msg != nullptr ? stream.msg : zError(status)) + ")");
    }
    const std::size_t produced = stream.total_out;
    if (tlsChunkExact > 0 && produced < tlsChunkExact)
        return fail("a compressed chunk inflates to " + std::to_string(produced) +
                    " bytes, fewer than its declared size of " + std::to_string(tlsChunkExact) +
                    " bytes: the chunk is damaged");
    inflateEnd(&stream);
    H5free_memory(*buf);
    *buf = out;
    *bufSize = allocated;
    return produced;
}

size_t boundedDeflate(unsigned flags, size_t cdCount, const unsigned cdValues[], size_t nbytes, size_t* bufSize,
                      void** buf) {
    if ((flags & H5Z_FLAG_REVERSE) != 0) return inflateBounded(nbytes, bufSize, buf);
    // Compression exactly as HDF5 does it.
    uLongf destinationBytes = compressBound(uLong(nbytes));
    auto* out = static_cast<Bytef*>(H5allocate_memory(destinationBytes, false));
    if (out == nullptr) return 0;
    const int level = cdCount > 0 ? int(cdValues[0]) : Z_DEFAULT_COMPRESSION;
    if (compress2(out, &destinationBytes, static_cast<const Bytef*>(*buf), uLong(nbytes), level) != Z_OK) {
        H5free_memory(out);
        return 0;
    }
    H5free_memory(*buf);
    *buf = out;
    *bufSize = nbytes;
    return destinationBytes;
}

}  // namespace

void installBoundedDeflate() {
    static std::once_flag once;
    std::call_once(once, [] {
        using Register = herr_t (*)(const H5Z_class2_t*);
        H5open();
        const auto internalRegister = reinterpret_cast<Register>(dlsym(RTLD_DEFAULT, "H5Z_register"));
        if (internalRegister == nullptr) return;
        static const H5Z_class2_t filter = {H5Z_CLASS_T_VERS, H5Z_FILTER_DEFLATE, 1, 1, "deflate (bounded)", nullptr,
                                            nullptr,          boundedDeflate};
        gInstalled = internalRegister(&filter) >= 0;
    });
}

bool boundedDeflateInstalled() { return gInstalled; }

ChunkReadLimit::ChunkReadLimit(hid_t dataset, hid_t fileType) {
    tlsFailure.clear();
    Handle plist(H5Dget_create_plist(dataset));
    if (!plist.valid() || H5Pget_layout(plist.get()) != H5D_CHUNKED) return;
    hsize_t dims[H5S_MAX_RANK];
    const int rank = H5Pget_chunk(plist.get(), H5S_MAX_RANK, dims);
    if (rank <= 0) return;
    std::size_t bytes = H5Tget_size(fileType);
    for (int i = 0; i < rank; ++i) {
        if (dims[i] == 0 || bytes > kUnknownChunkLimit / dims[i]) return;
        bytes *= std::size_t(dims[i]);
    }
    tlsChunkLimit = bytes;
    bool whole = true;
    const int filters = H5Pget_nfilters(plist.get());
    for (int f = 0; f < filters && whole; ++f) {
        unsigned flags = 0, config = 0;
        std::size_t count = 0;
        const H5Z_filter_t id = H5Pget_filter2(plist.get(), unsigned(f), &flags, &count, nullptr, 0, nullptr, &config);
        whole = id == H5Z_FILTER_DEFLATE || id == H5Z_FILTER_SHUFFLE || id == H5Z_FILTER_FLETCHER32;
    }
    tlsChunkExact = whole ? bytes : 0;
}

ChunkReadLimit::~ChunkReadLimit() {
    tlsChunkLimit = 0;
    tlsChunkExact = 0;
}

std::string ChunkReadLimit::failure() const { return tlsFailure; }

}  // namespace attnlens::h5
