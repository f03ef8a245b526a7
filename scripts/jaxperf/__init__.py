"""The library the root skill's entry scripts share, by layer; each layer imports only those
above it in this list and the platform (`tracekit`, in the sibling skill):

- `read`: the capture's records (the XSpace and HLO schemas, the xplane, XProf's own figures);
- `program`: an HLO program (schedules, source frames, its text);
- `match`: each GPU kernel to its instruction (the events and executions read, the families);
- `cost`: an instruction's FLOPs and bytes, custom calls' from their configs, the ceiling that
  bounds it (whichever device gives it);
- `gpu`: a GPU's own: its datasheet ceilings (references/peaks.csv), the model its device stats
  identify;
- `tpu`: a TPU's own: its op runs, read from its device planes (each run is its instruction:
  nothing to match), its chip and peaks, its knobs;
- `device`: the adapters, the one door from the analyses to a device's own modules (the
  analyses never import `match`, `gpu` or `tpu`: tests/test_house.py);
- `steps`: step 6's model of the steps (frames, critical paths, the context its causes read);
- `report`: a report's grammar for the fact check, the pictures' SVG;
- `analyses`: each step's analysis behind its door (the entry script of the same name in
  scripts/, which holds its command line and what it prints);
- `job`: the runner of investigate.py's steps.
"""
