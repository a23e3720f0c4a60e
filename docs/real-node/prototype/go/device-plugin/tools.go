//go:build tools

package tools

import _ "github.com/NVIDIA/k8s-device-plugin/cmd/nvidia-device-plugin"
