// OpenMPI's MPI_Allreduce (float sum, in place) for each size, the baseline of
// bench/collective_allreduce.sh: mpirun -n N fedmesh_mpi_allreduce. Rank 0 prints one line per
// size: openmpi ranks bytes median_s algbw_GBps busbw_GBps.
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "bench/bench_util.h"

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  std::vector<unsigned long long> sizes = {1024, 16384, 262144, 4194304, 67108864, 268435456};
  if (argc > 1) {
    sizes.clear();
    for (int i = 1; i < argc; ++i) sizes.push_back(std::strtoull(argv[i], nullptr, 10));
  }
  for (unsigned long long bytes : sizes) {
    const int reps = bytes <= (1u << 20) ? 50 : bytes <= (16u << 20) ? 10 : 4;
    std::vector<float> buf(bytes / 4, 1.0f);
    std::vector<double> times;
    MPI_Allreduce(MPI_IN_PLACE, buf.data(), static_cast<int>(buf.size()), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    for (int i = 0; i < reps; ++i) {
      MPI_Barrier(MPI_COMM_WORLD);
      const double start = MPI_Wtime();
      MPI_Allreduce(MPI_IN_PLACE, buf.data(), static_cast<int>(buf.size()), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      times.push_back(MPI_Wtime() - start);
    }
    if (rank == 0) {
      const double s = fedmesh::bench::Median(times);
      const double alg = bytes / s / 1e9;
      std::printf("openmpi %d %llu %.6f %.4f %.4f\n", size, bytes, s, alg, alg * 2.0 * (size - 1) / size);
      std::fflush(stdout);
    }
  }
  MPI_Finalize();
  return 0;
}
