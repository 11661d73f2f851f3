/* A plain C program using the installed dfgnn: builds a 3-node graph and checks its size. */
#include <dfgnn/dfgnn.h>
#include <stdio.h>

int main(void) {
  dfgnn_context_t ctx;
  dfgnn_graph_t graph;
  const int32_t edge_index[] = {0, 1, 2, /* -> */ 1, 2, 0};
  int64_t n = 0, e = 0;
  if (dfgnnCreate(&ctx) != DFGNN_STATUS_SUCCESS) return 1;
  if (dfgnnGraphCreateCoo(ctx, 3, 3, edge_index, DFGNN_INDEX_INT32, DFGNN_MEMORY_HOST, NULL, &graph) !=
      DFGNN_STATUS_SUCCESS) {
    fprintf(stderr, "%s\n", dfgnnGetLastErrorMessage());
    return 1;
  }
  dfgnnGraphGetSize(graph, &n, &e);
  printf("dfgnn %s: graph with %lld nodes and %lld edges\n", dfgnnGetVersion(), (long long)n, (long long)e);
  dfgnnGraphDestroy(graph);
  dfgnnDestroy(ctx);
  return (n == 3 && e == 3) ? 0 : 1;
}
