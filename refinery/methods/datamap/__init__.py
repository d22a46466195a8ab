"""Data maps (Swayamdipta et al. 2020, "Dataset Cartography"): training dynamics per row, and the regions they draw."""
