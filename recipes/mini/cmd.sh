# Everything runs locally on this machine (no Kaldi, no cluster): jobs are processes (--nj).
export nj=${nj:-2}
