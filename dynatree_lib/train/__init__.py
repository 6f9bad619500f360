"""Building the cpu profile's draft: its instruction set, teacher data, distillation, calibration, lookup and card."""
