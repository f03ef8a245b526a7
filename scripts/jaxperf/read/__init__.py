"""The capture's records: the XSpace and HLO schemas, the xplane, XProf's own figures."""
