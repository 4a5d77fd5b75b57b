"""What is read from data and decided once: combos (envs/), recipes (recipes/), stacks
(stacks/), CUDA arches and platforms (data/), the target a command builds for, the typed build
request, the checks of a command's inputs, and the matrix and CI workflow derived from them."""
