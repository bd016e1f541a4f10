// Linked into every executable of the sanitizer build (scripts/sanitize.sh):
// dlclose that keeps the module loaded. Open MPI unloads its components in
// MPI_Finalize; what they allocated and keep until exit by design would then
// show in LeakSanitizer's report as leaks from "<unknown module>", which no
// suppression can name. Kept loaded, they are named (libmpi's components,
// mca_*), and tests/sanitize/lsan.supp can suppress exactly those.
extern "C" int dlclose(void*) {
  return 0;
}
