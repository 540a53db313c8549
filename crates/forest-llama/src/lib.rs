//! LLAMA, the Bw-tree's cache layer: mapping table of page states, Update-D/Update-R, epoch reclamation
