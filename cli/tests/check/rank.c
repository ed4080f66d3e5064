/* One rank of a job that links libnccl.so.2 as any NCCL program does (the
 * tests link it against the stand-in NCCL of interpose/tests/standin), for
 * `rankwise check`'s tests.
 *
 *   rank DIR SCENARIO CALLS
 *
 * The rank and the number of ranks come from the launcher's variables:
 * RANK and WORLD_SIZE (torchrun, tests/check/launch.sh), or
 * OMPI_COMM_WORLD_RANK and OMPI_COMM_WORLD_SIZE (OpenMPI's mpirun). Rank 0
 * makes the unique id and leaves it in DIR/id for the others.
 *
 * SCENARIO clean: CALLS AllReduces of 4 int32, sum; rank r sends
 *   r*10 + i + k at element i of call k, so every rank must receive
 *   10*N(N-1)/2 + N*(i+k); each element is compared, exit 1 on the first
 *   wrong one.
 * SCENARIO count: one such AllReduce, then rank 2 passes count 5 where the
 *   others pass 4; every rank prints what that call returned and exits 1
 *   when it was refused (as a program whose NCCL call failed does).
 *
 * With RANKWISE_TEST_SHOW_PRELOAD=1 each rank prints its LD_PRELOAD and the
 * preloaded libraries the loader mapped, in the order of its maps.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <time.h>

typedef struct { char internal[128]; } ncclUniqueId;
typedef void *ncclComm_t;
int ncclGetUniqueId(ncclUniqueId *id);
int ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank);
int ncclAllReduce(const void *send, void *recv, size_t count, int datatype, int op,
                  ncclComm_t comm, void *stream);
int ncclCommDestroy(ncclComm_t comm);

enum { NCCL_INT32 = 2, NCCL_SUM = 0 };

static int env_int(const char *a, const char *b) {
    const char *v = getenv(a);
    if (!v) v = getenv(b);
    if (!v) {
        fprintf(stderr, "rank: neither %s nor %s is set\n", a, b);
        exit(2);
    }
    return atoi(v);
}

static void share_id(const char *dir, int rank, ncclUniqueId *id) {
    char path[4096], tmp[4096];
    snprintf(path, sizeof path, "%s/id", dir);
    snprintf(tmp, sizeof tmp, "%s/id.tmp", dir);
    if (rank == 0) {
        if (ncclGetUniqueId(id) != 0) { fprintf(stderr, "ncclGetUniqueId failed\n"); exit(1); }
        FILE *f = fopen(tmp, "wb");
        if (!f || fwrite(id, sizeof *id, 1, f) != 1 || fclose(f) != 0 || rename(tmp, path) != 0) {
            perror("writing the id"); exit(1);
        }
        return;
    }
    for (int tries = 0; tries < 20000; tries++) {
        FILE *f = fopen(path, "rb");
        if (f) {
            size_t got = fread(id, sizeof *id, 1, f);
            fclose(f);
            if (got == 1) return;
        }
        struct timespec ms = {0, 1000000};
        nanosleep(&ms, NULL);
    }
    fprintf(stderr, "rank %d: no id from rank 0 in %s\n", rank, dir);
    exit(1);
}

static void show_preload(int rank) {
    const char *p = getenv("LD_PRELOAD");
    printf("rank %d LD_PRELOAD=%s\n", rank, p ? p : "");
    FILE *m = fopen("/proc/self/maps", "r");
    char line[8192], last[4096] = "";
    while (m && fgets(line, sizeof line, m)) {
        char *path = strchr(line, '/');
        if (!path) continue;
        path[strcspn(path, "\n")] = 0;
        if (strcmp(path, last) == 0) continue;
        snprintf(last, sizeof last, "%s", path);
        if (strstr(path, "rankwise_nccl") || strstr(path, "libmark")) printf("rank %d mapped %s\n", rank, path);
    }
    if (m) fclose(m);
}

/* One AllReduce of `count` int32 (call k), its result checked when it succeeds. */
static int all_reduce(ncclComm_t comm, int rank, int n, int k, size_t count) {
    int send[8], recv[8];
    for (size_t i = 0; i < count; i++) { send[i] = rank * 10 + (int)i + k; recv[i] = -1; }
    int rc = ncclAllReduce(send, recv, count, NCCL_INT32, NCCL_SUM, comm, NULL);
    if (rc != 0) return rc;
    for (size_t i = 0; i < count; i++) {
        int want = 10 * n * (n - 1) / 2 + n * ((int)i + k);
        if (recv[i] != want) {
            fprintf(stderr, "rank %d: call %d element %zu is %d, expected %d\n", rank, k, i, recv[i], want);
            exit(1);
        }
    }
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 4) { fprintf(stderr, "usage: rank DIR clean|count CALLS\n"); return 2; }
    const char *dir = argv[1], *scenario = argv[2];
    int calls = atoi(argv[3]);
    int rank = env_int("RANK", "OMPI_COMM_WORLD_RANK");
    int n = env_int("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE");
    if (getenv("RANKWISE_TEST_SHOW_PRELOAD")) show_preload(rank);
    ncclUniqueId id;
    share_id(dir, rank, &id);
    ncclComm_t comm;
    int rc = ncclCommInitRank(&comm, n, id, rank);
    if (rc != 0) { fprintf(stderr, "rank %d: ncclCommInitRank returned %d\n", rank, rc); return 1; }
    if (strcmp(scenario, "clean") == 0) {
        for (int k = 0; k < calls; k++) {
            rc = all_reduce(comm, rank, n, k, 4);
            if (rc != 0) { fprintf(stderr, "rank %d: AllReduce %d returned %d\n", rank, k, rc); return 1; }
        }
        printf("rank %d: %d AllReduces right\n", rank, calls);
    } else if (strcmp(scenario, "count") == 0) {
        rc = all_reduce(comm, rank, n, 0, 4);
        if (rc != 0) { fprintf(stderr, "rank %d: first AllReduce returned %d\n", rank, rc); return 1; }
        rc = all_reduce(comm, rank, n, 1, rank == 2 ? 5 : 4);
        printf("rank %d: AllReduce of count %d returned %d\n", rank, rank == 2 ? 5 : 4, rc);
        if (rc != 0) return 1;
    } else {
        fprintf(stderr, "rank: unknown scenario %s\n", scenario);
        return 2;
    }
    ncclCommDestroy(comm);
    return 0;
}
