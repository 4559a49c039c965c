/* A fault injected into HDF5's read path, the same on every machine (issue 52).
 *
 * Loaded with LD_PRELOAD into attnlens-cli, it stands in for H5Dread. When the dataset being read
 * has a name that contains ATTNLENS_TEST_HDF5_FAULT, it overflows the reading thread's stack by
 * unbounded recursion, as HDF5 1.10 does on a chunk B-tree that loops onto itself; every other
 * read goes to the real H5Dread. A damaged file reaches such a fault only on some machines (HDF5
 * reads memory the file never defined, so its path depends on what that memory holds); this one
 * always does, so the crash handler's contract is tested everywhere. With
 * ATTNLENS_TEST_HDF5_FAULT_KIND=stall the read never returns instead, as HDF5 looping on damaged
 * metadata (the reading process's time limit, read_server.h). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <hdf5.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef herr_t (*ReadFunction)(hid_t, hid_t, hid_t, hid_t, hid_t, void*);

/* Each frame keeps 4 KiB live across the call, so the compiler cannot turn the recursion into a
 * loop: an 8 MiB thread stack overflows after about 2,000 calls. */
static size_t recurse(volatile unsigned char* previous, size_t depth) {
    volatile unsigned char frame[4096];
    frame[0] = (unsigned char)(previous[0] + 1u);
    frame[sizeof frame - 1] = (unsigned char)depth;
    if (depth == (size_t)-1) return frame[0];
    return recurse(frame, depth + 1) + frame[sizeof frame - 1];
}

herr_t H5Dread(hid_t dataset, hid_t memoryType, hid_t memorySpace, hid_t fileSpace, hid_t transfer, void* buffer) {
    static ReadFunction real = NULL;
    if (real == NULL) {
        /* ISO C has no cast from an object pointer to a function pointer: copy the bits. */
        void* symbol = dlsym(RTLD_NEXT, "H5Dread");
        memcpy(&real, &symbol, sizeof real);
    }
    const char* wanted = getenv("ATTNLENS_TEST_HDF5_FAULT");
    if (wanted != NULL && *wanted != '\0') {
        char name[1024] = "";
        if (H5Iget_name(dataset, name, sizeof name) > 0 && strstr(name, wanted) != NULL) {
            const char* kind = getenv("ATTNLENS_TEST_HDF5_FAULT_KIND");
            if (kind != NULL && strcmp(kind, "stall") == 0)
                for (;;) sleep(1000);
            volatile unsigned char start[1] = {0};
            return (herr_t)recurse(start, 0);
        }
    }
    return real(dataset, memoryType, memorySpace, fileSpace, transfer, buffer);
}
