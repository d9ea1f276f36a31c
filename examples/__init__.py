"""Example NRI plugins built on :mod:`nri_pinner.nri.stub`."""
