# Sourced by the scripts: how colrow runs Open MPI on one machine.
# Root (containers, CI) needs Open MPI's explicit consent; ranks that wait
# should yield their core; containers without ptrace need the copy-in/copy-out
# shared-memory path.
if [ "$(id -u)" -eq 0 ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
export OMPI_MCA_mpi_yield_when_idle=${OMPI_MCA_mpi_yield_when_idle:-1}
export OMPI_MCA_btl_vader_single_copy_mechanism=${OMPI_MCA_btl_vader_single_copy_mechanism:-none}
