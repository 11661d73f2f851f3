// Graph sources other than caller arrays: files (dataset edge lists, Matrix Market) and seeded
// synthetic generators. Each produces an edge list that Graph::from_coo validates and builds.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dfgnn {

struct EdgeList {
  int64_t num_nodes = 0;
  std::vector<int64_t> edge_index;  // [2, E]: sources, then destinations
  int64_t num_edges() const { return static_cast<int64_t>(edge_index.size() / 2); }
};

// Edge-list format of dfgnn's datasets (plain or .gz), Matrix Market (.mtx, .mtx.gz), or a dataset
// directory (DIR/edges.txt or DIR/edges.txt.gz). Throws IO_ERROR / PARSE_ERROR with file and line.
EdgeList read_graph_file(const std::string& path);

// R-MAT: 2^scale nodes, num_edges samples, quadrant probabilities a, b, c, flags DFGNN_RMAT_*.
EdgeList generate_rmat(int32_t scale, int64_t num_edges, double a, double b, double c, uint32_t flags,
                       uint64_t seed);
// Uniform graph with planted hubs (see dfgnnGraphCreatePlantedHubs).
EdgeList generate_planted_hubs(int64_t num_nodes, int32_t avg_degree, int32_t num_hubs, int64_t hub_degree,
                               uint64_t seed);

}  // namespace dfgnn
