"""The library the root skill's entry scripts share, by layer; each layer imports only those
above it in this list and the platform (`tracekit`, in the sibling skill):

- `read`: the capture's records (the XSpace and HLO schemas, the xplane, XProf's own figures);
- `program`: an HLO program (schedules, source frames, its text);
- `match`: each GPU kernel to its instruction (the events and executions read, the families);
- `cost`: an instruction's FLOPs and bytes, custom calls' from their configs, the GPU's ceilings;
- `tpu`: a TPU's op runs, read from its device planes (each run is its instruction: nothing to
  match);
- `steps`: step 6's model of the steps (frames, critical paths, the context its causes read);
- `report`: a report's grammar for the fact check, the pictures' SVG;
- `job`: the runner of investigate.py's steps.
"""
