#include "sim/rank_group.h"

#include <cstdlib>
#include <string>

namespace fedmesh {

int LauncherWorldSize() {
  // OpenMPI's mpirun, then Hydra's (MPICH, Intel MPI).
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"}) {
    if (const char* v = std::getenv(name); v != nullptr && *v != '\0') {
      try {
        return std::stoi(v);
      } catch (...) {
        return 0;
      }
    }
  }
  return 0;
}

}  // namespace fedmesh
