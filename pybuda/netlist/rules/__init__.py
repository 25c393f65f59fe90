"""The netlist rules: the framework (:mod:`~pybuda.netlist.rules.framework`) and four rule families
(structure, queues, ops, programs). :mod:`pybuda.netlist.validate` runs them in that order."""
