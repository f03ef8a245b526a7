"""Each GPU kernel matched to the HLO instruction that launched it."""
