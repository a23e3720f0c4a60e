module gpucloud.local/build/pause

go 1.24
