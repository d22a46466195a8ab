"""The pipeline layer: the stage contract (``stage``), where work runs (``engine``), pipeline files
(``config``) and the runner that chains stages into ``OUT/NN-stage/`` folders (``runner``)."""
